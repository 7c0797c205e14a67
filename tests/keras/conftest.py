"""Keras tests need Keras (the ``keras`` extra, which ``make test`` installs): without it they
fail with cairn's FrameworkUnavailableError, which names the install command, rather than
being skipped. No test here imports Keras on a backend other than torch in the test process."""
