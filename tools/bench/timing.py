"""What the Python benchmarks share: the time per call of a function over several trials."""
import statistics
import time


def trial_times(fn, seconds, trials, min_calls=3):
    """Seconds per call of fn in each of `trials` trials of about `seconds` each (at least `min_calls` calls
    per trial), after one call to warm up."""
    fn()
    per_call = []
    for _ in range(trials):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds and calls >= min_calls:
                break
        per_call.append(elapsed / calls)
    return per_call


def timed(fn, seconds, trials, min_calls=3):
    """Median seconds per call of fn over `trials` trials of about `seconds` each (at least `min_calls` calls
    per trial), after one call to warm up."""
    return statistics.median(trial_times(fn, seconds, trials, min_calls))
