"""Keras tests need Keras (the ``keras`` extra, which ``make test`` installs); no test here
imports Keras on a backend other than torch in the test process."""

from cairn.policy.keras_backend import keras_available

collect_ignore_glob = [] if keras_available() else ["test_*.py"]
