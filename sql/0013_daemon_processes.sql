-- Instant recovery on the same host (issue 16, item 4). Each daemon process says who it is at
-- start and at every rescue pass: its worker name (the claimed_by of its claims), the boot id and
-- pid namespace it runs in, its pid and its start time in clock ticks since boot
-- (/proc/<pid>/stat). A daemon in the same boot and pid namespace can then prove such a process
-- dead (no process with that pid and start time) and rescue its claims at once, instead of after
-- the rescue delay; a process of another boot or namespace (another host, a container) keeps the
-- delay. A row missing here only means the delay applies, so rows are deleted freely: a process
-- that has not said so for a day is forgotten. The hot path never reads or writes this table.
CREATE TABLE email_daemon_processes (
    boot_id     uuid        NOT NULL,
    pid_ns      text        NOT NULL,
    pid         integer     NOT NULL,
    start_ticks bigint      NOT NULL,
    worker      text        NOT NULL,
    seen_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (boot_id, pid_ns, pid, start_ticks)
);
CREATE INDEX email_daemon_processes_worker ON email_daemon_processes (worker);
