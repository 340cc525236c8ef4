"""The launcher's charts: what the main job does over time, as TensorBoard event files (--logdir) and as one PNG drawn
when the run ends (--plot). Both come from the same series, which the launcher alone collects: the learning curve
from the actors' @progress lines (the mean return of the episodes that ended in each 10 s), and once a second the
buffer's own counters (Buffer.rate_limit_state(): steps inserted, rows sampled, and with a rate limiter its error and
the sample calls and pushes it held back), so no worker process writes a file or imports TensorBoard.

Tags (TensorBoard's step is the env steps pushed so far, CleanRL's global_step; the event's wall time is the time the
figure is of, so TensorBoard's "relative" axis shows seconds since the job started):

    charts/episodic_return         mean return of the episodes that ended in the last 10 s (actors' clocks)
    charts/episodes                how many episodes ended in those 10 s
    charts/SPS                     env steps pushed per second, all actors (over the last second)
    charts/rows_sampled_per_s      rows sampled per second, every learner rank (over the last second)
    rate_limit/samples_per_insert  rows sampled per step pushed since the start (the limiter's target is constant)
    rate_limit/error               the limiter's error, inserts x samples_per_insert - samples, in rows
    rate_limit/learner_held_back   sample calls the limiter held back since the start
    rate_limit/writers_held_back   pushes the limiter held back since the start

The rate_limit/ tags are written only when the buffer has a ratio limiter. Writing uses PyTorch's SummaryWriter
(torch.utils.tensorboard, which needs the tensorboard package); drawing uses matplotlib with the Agg backend (no
display). docs/python.md, "The envpool example", says why these two."""
import os
import time

CURVE_TAGS = ("charts/episodic_return", "charts/episodes")
RATE_TAGS = ("charts/SPS", "charts/rows_sampled_per_s")
LIMITER_TAGS = ("rate_limit/samples_per_insert", "rate_limit/error", "rate_limit/learner_held_back",
                "rate_limit/writers_held_back")


def check_available(logdir, plot):
    """An error message when --logdir or --plot cannot work here (a package missing), else None: the launcher checks
    before it makes the buffer or starts a process."""
    if logdir:
        try:
            from torch.utils.tensorboard import SummaryWriter  # noqa: F401
        except ImportError as e:
            return (f"--logdir needs PyTorch and the tensorboard package (pip install tensorboard; tools/setup.sh "
                    f"installs the version the project pins): {e}")
    if plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError as e:
            return f"--plot needs matplotlib (pip install matplotlib; envpool installs it): {e}"
    return None


def parse_size(text):
    """'WIDTHxHEIGHT' in pixels -> (width, height); ValueError otherwise."""
    w, sep, h = text.lower().partition("x")
    if not sep or not w.isdigit() or not h.isdigit() or not (100 <= int(w) <= 4000 and 100 <= int(h) <= 4000):
        raise ValueError(f"{text!r}: WIDTHxHEIGHT in pixels, each 100 to 4000 (e.g. 1000x700)")
    return int(w), int(h)


class Charts:
    """The series of one run. The launcher's main loop calls tick(t) every time it goes round (tick samples the
    buffer once a second) and finish() once at the end; the threads that read the actors' lines only append to
    the launcher's curve list, under the launcher's lock, and tick writes the new points, so the event file has one
    writer thread."""

    def __init__(self, buf, curve, lock, logdir=None, run_name=None, every_s=1.0):
        """Made before any worker starts (so that a log directory that cannot be made stops the launcher before it has
        processes to stop); start() when the job's clock starts."""
        self.buf, self.curve, self.lock, self.every_s = buf, curve, lock, every_s
        self.started_wall = time.time()
        self.limited = buf.rate_limit is not None and buf.rate_limit.has_ratio
        self.samples = []            # (t, inserts, samples, error, learner_limited, writers_limited)
        self.rates = []              # (t, env steps/s, rows/s) over the interval ending at t
        self.points = []             # (t, mean return, episodes, env steps when written)
        self.next_t = 0.0
        self.writer, self.run_dir = None, None
        if logdir:
            from torch.utils.tensorboard import SummaryWriter
            self.run_dir = os.path.join(logdir, run_name)
            self.writer = SummaryWriter(self.run_dir, flush_secs=5)

    def start(self):
        """The job's clock starts (t = 0): the first sample of the buffer's counters."""
        self.started_wall = time.time()
        self.samples, self.rates, self.next_t = [], [], 0.0
        self._sample(0.0)

    def _sample(self, t, rate=True):
        s = self.buf.rate_limit_state()
        row = (t, s.inserts, s.samples, s.error if self.limited else 0.0, s.learner_limited, s.writers_limited)
        if rate and self.samples:
            t0, inserts0, samples0 = self.samples[-1][:3]
            if t > t0:
                self.rates.append((t, (s.inserts - inserts0) / (t - t0), (s.samples - samples0) / (t - t0)))
                self._write_rates(*self.rates[-1], s.inserts)
        self.samples.append(row)
        if self.limited and s.inserts:
            self._write_limiter(row)

    def _scalar(self, tag, value, step, t):
        if self.writer is not None:
            self.writer.add_scalar(tag, value, global_step=step, walltime=self.started_wall + t)

    def _write_rates(self, t, sps, rows, step):
        self._scalar("charts/SPS", sps, step, t)
        self._scalar("charts/rows_sampled_per_s", rows, step, t)

    def _write_limiter(self, row):
        t, inserts, samples, error, learner_limited, writers_limited = row
        self._scalar("rate_limit/samples_per_insert", samples / inserts, inserts, t)
        self._scalar("rate_limit/error", error, inserts, t)
        self._scalar("rate_limit/learner_held_back", learner_limited, inserts, t)
        self._scalar("rate_limit/writers_held_back", writers_limited, inserts, t)

    def _write_curve(self):
        with self.lock:
            fresh = self.curve[len(self.points):]
        step = self.samples[-1][1]
        for t, mean_return, episodes in fresh:
            self.points.append((t, mean_return, episodes, step))
            self._scalar("charts/episodic_return", mean_return, step, t)
            self._scalar("charts/episodes", episodes, step, t)

    def tick(self, t):
        """t: seconds since the job's clock started. Samples the buffer when a second has passed since the last."""
        if t >= self.next_t + self.every_s:
            self.next_t = t
            self._sample(t)
        self._write_curve()

    def finish(self, t):
        """After every process stopped (t: when the launcher sent SIGTERM): the final counts (no rate: the workers'
        last pushes and samples came during the shutdown), the last curve points, and the event file closed."""
        if not self.samples:  # stopped before the clock started
            self.start()
        if t > self.samples[-1][0]:
            self._sample(t, rate=False)
        self._write_curve()
        if self.writer is not None:
            self.writer.close()

    def plot(self, path, size=(1000, 700), title=""):
        """One PNG of `size` pixels: the learning curve, the throughputs (env steps/s on the left axis, rows sampled/s
        on the right) and, with a limiter, the sample calls and pushes it held back per second; time on x."""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        panels = 3 if self.limited else 2
        dpi = 100
        fig, axes = plt.subplots(panels, 1, figsize=(size[0] / dpi, size[1] / dpi), dpi=dpi, sharex=True)
        ax = axes[0]
        if self.points:
            ax.plot([p[0] for p in self.points], [p[1] for p in self.points], "o-", color="tab:green", ms=3)
        ax.set_ylabel("mean return\n(per 10 s)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax = axes[1]
        ts = [r[0] for r in self.rates]
        ax.plot(ts, [r[1] for r in self.rates], color="tab:blue", lw=1, label="env steps/s (left)")
        ax.set_ylabel("env steps/s", color="tab:blue")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        right = ax.twinx()
        right.plot(ts, [r[2] for r in self.rates], color="tab:orange", lw=1, label="rows sampled/s (right)")
        right.set_ylabel("rows sampled/s", color="tab:orange")
        right.set_ylim(bottom=0)
        lines = ax.get_lines() + right.get_lines()
        ax.legend(lines, [line.get_label() for line in lines], loc="lower right", fontsize=8)
        if self.limited:
            ax = axes[2]
            pairs = list(zip(self.samples, self.samples[1:]))
            ts = [b[0] for a, b in pairs]
            ax.plot(ts, [(b[4] - a[4]) / (b[0] - a[0]) for a, b in pairs], color="tab:red", lw=1,
                    label="sample calls held back/s")
            ax.plot(ts, [(b[5] - a[5]) / (b[0] - a[0]) for a, b in pairs], color="tab:purple", lw=1,
                    label="pushes held back/s")
            ax.set_ylabel("rate limiter")
            ax.set_ylim(bottom=0)
            ax.legend(loc="upper right", fontsize=8)
            ax.grid(alpha=0.3)
        axes[-1].set_xlabel("seconds since the job started")
        fig.tight_layout()
        fig.savefig(path, dpi=dpi)
        plt.close(fig)
        shrink_png(path)


def shrink_png(path, colors=128):
    """Rewrites a PNG with a palette of `colors` (Pillow, which matplotlib requires): a line plot's few colours and
    their anti-aliasing survive, and the file is about a third of the size (the README's picture is one)."""
    from PIL import Image
    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=colors)
    small.save(path, optimize=True)
