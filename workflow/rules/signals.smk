# SIGTERM to Snakemake (a `timeout`, a service manager, `kill PID`) and SIGINT (`kill -INT PID`,
# Ctrl-C) reach the running local jobs as SIGTERM. Snakemake 9 alone takes SIGTERM as "exit
# after the running jobs finish" and leaves them running, hours for a training job, and SIGINT
# as "cancel": its jobs are killed and their outputs deleted. Forwarded, a trainer checkpoints
# and exits 143, Snakemake marks its outputs incomplete, and the next run (`--rerun-incomplete`)
# resumes from the checkpoint. SIGINT is forwarded as SIGTERM: a job in the terminal's process
# group also gets the terminal's SIGINT, and a trainer takes a second SIGINT as "stop without a
# checkpoint". A second SIGINT to Snakemake interrupts it at once. Cluster jobs are not
# children of this process: a scheduler's own signals reach them.
import signal


def forward_stop_signals_to_jobs():
    import psutil

    graceful = signal.getsignal(
        signal.SIGTERM
    )  # the scheduler's, installed before onstart
    interrupt = signal.getsignal(signal.SIGINT)

    def forward(signum, frame):
        for job in psutil.Process().children(recursive=True):
            try:
                job.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                pass
        if signum == signal.SIGINT:
            signal.signal(signal.SIGINT, interrupt)  # a second Ctrl-C: at once
        if callable(graceful):
            graceful(signal.SIGTERM, frame)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)


onstart:
    forward_stop_signals_to_jobs()
