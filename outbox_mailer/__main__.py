from outbox_mailer.cli import main

if __name__ == "__main__":  # not when a worker process (templating/worker.py) loads the main module again
    raise SystemExit(main())
