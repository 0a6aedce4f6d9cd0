# SIGTERM to Snakemake (a `timeout`, a service manager, `kill PID`) reaches the running local
# jobs. Snakemake 9 alone takes SIGTERM as "exit after the running jobs finish" and leaves them
# running, hours for a training job; forwarded, a trainer checkpoints and exits 143, Snakemake
# marks its outputs incomplete, and the next run (`--rerun-incomplete`) resumes from the
# checkpoint. Cluster jobs are not children of this process: a scheduler's own signals reach them.
import signal


def forward_sigterm_to_jobs():
    import psutil

    graceful = signal.getsignal(
        signal.SIGTERM
    )  # the scheduler's, installed before onstart

    def forward(signum, frame):
        for job in psutil.Process().children(recursive=True):
            try:
                job.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                pass
        if callable(graceful):
            graceful(signum, frame)

    signal.signal(signal.SIGTERM, forward)


onstart:
    forward_sigterm_to_jobs()
