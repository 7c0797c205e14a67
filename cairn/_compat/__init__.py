"""The third-party internals cairn relies on: one module per library, each naming the private
attributes it touches, why, and the versions it is supported on (pinned in pyproject.toml).

No other cairn module touches a library's private attributes; ``tests/test_architecture.py``
holds these modules in an explicit allow-list and refuses private access anywhere else.
"""
