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


def _statement_trial(statement, namespace, seconds):
    """A timeit.Timer of `statement` and the number of executions that take about `seconds`."""
    import timeit

    timer = timeit.Timer(statement, globals=namespace)
    timer.timeit(1)
    number = 1
    while True:
        elapsed = timer.timeit(number)
        if elapsed >= seconds / 10:
            break
        number *= 4
    return timer, max(1, int(number * seconds / elapsed))


def timed_statement(statement, namespace, seconds, trials):
    """Median seconds per execution of `statement` (a line of Python, run with the names in `namespace`) over
    `trials` trials of about `seconds` each: timeit's loop, so the figure is the statement's cost plus about 10 ns
    of loop, without the function call and clock read per call that timed() adds (about 130 ns here)."""
    timer, number = _statement_trial(statement, namespace, seconds)
    return statistics.median(timer.timeit(number) / number for _ in range(trials))


def interleaved_ratio(statement_a, units_a, statement_b, units_b, namespace, seconds, trials):
    """The median over `trials` of (time per unit of statement_a) / (time per unit of statement_b), each trial
    timing a then b right after it (timed_statement's loops), so a drift of the machine's speed between trials
    cancels out of every ratio."""
    timer_a, number_a = _statement_trial(statement_a, namespace, seconds)
    timer_b, number_b = _statement_trial(statement_b, namespace, seconds)
    ratios = []
    for _ in range(trials):
        a = timer_a.timeit(number_a) / (number_a * units_a)
        b = timer_b.timeit(number_b) / (number_b * units_b)
        ratios.append(a / b)
    return statistics.median(ratios)
