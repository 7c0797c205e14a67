"""A real S3-protocol server for the tests: moto in server mode on 127.0.0.1.

s3fs tests its own S3 code this way (``moto.server.ThreadedMotoServer``). cairn talks to it
through s3fs exactly as a user would talk to AWS: a URL ``s3://<bucket>/...`` and
``storage_options`` (or ``AWS_ENDPOINT_URL`` and the AWS credential variables).

Use it through the pytest fixtures registered in ``tests/conftest.py``:

* ``s3_server`` (session scope): the running :class:`S3Server`; one per test session.
* ``s3`` (function scope): an :class:`S3Bucket` made empty for the test, with
  ``bucket.url("ckpt")`` -> ``"s3://<bucket>/ckpt"`` and ``bucket.storage_options``
  (endpoint and dummy credentials) for every cairn call. s3fs's instance and listing caches
  are cleared before each test.

Or by hand (in a child process, say): ``server = S3Server.start()`` then ``server.stop()``.
The server also logs the requests it served as ``(method, path)`` (``server.requests()``,
``server.request_counts()``, reset by ``server.reset_requests()``; a server-side copy is logged
as method ``"COPY"``), which is how tests check that a subset restore reads only the objects of
the policies asked for, and that an incremental save copies instead of uploading.
"""

from __future__ import annotations

import secrets
import socket
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["S3Server", "S3Bucket", "ACCESS_KEY", "SECRET_KEY"]

ACCESS_KEY = "cairn-test-key"
SECRET_KEY = "cairn-test-secret"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class S3Server:
    """A running moto S3 server and a log of the requests it answered."""

    endpoint_url: str
    _server: Any
    _log: list[tuple[str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def start(cls) -> S3Server:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request on stderr
        port = _free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        self = cls(f"http://127.0.0.1:{port}", server)
        self._install_request_log()
        return self

    def _install_request_log(self) -> None:
        """Wrap the server's WSGI app so that every request's method and path is logged."""
        app = self._server._server.app  # werkzeug server -> moto's DomainDispatcherApplication
        log, lock = self._log, self._lock
        inner = app.__call__

        def logged(environ: dict[str, Any], start_response: Any) -> Any:
            with lock:
                method = environ["REQUEST_METHOD"]
                if method == "PUT" and "HTTP_X_AMZ_COPY_SOURCE" in environ:
                    method = "COPY"  # a server-side copy (CopyObject): no object bytes sent
                log.append((method, environ.get("PATH_INFO", "")))
            return inner(environ, start_response)

        self._server._server.app = _Logged(logged)

    @property
    def storage_options(self) -> dict[str, Any]:
        """fsspec/s3fs options that reach this server with the dummy credentials."""
        return {"key": ACCESS_KEY, "secret": SECRET_KEY,
                "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1"}}

    def client(self) -> Any:
        """A boto3 S3 client for this server (to make buckets, or to look behind cairn)."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint_url, region_name="us-east-1",
                            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)

    def new_bucket(self) -> S3Bucket:
        name = f"cairn-{secrets.token_hex(4)}"
        self.client().create_bucket(Bucket=name)
        return S3Bucket(self, name)

    def requests(self, method: str | None = None, contains: str = "") -> list[tuple[str, str]]:
        """The ``(method, path)`` of every request since the last :meth:`reset_requests`."""
        with self._lock:
            return [(m, p) for m, p in self._log if (method is None or m == method) and contains in p]

    def request_counts(self) -> Counter[str]:
        with self._lock:
            return Counter(m for m, _ in self._log)

    def reset_requests(self) -> None:
        with self._lock:
            self._log.clear()

    def stop(self) -> None:
        self._server.stop()


class _Logged:
    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        return self.fn(environ, start_response)


@dataclass
class S3Bucket:
    """One bucket of the test server."""

    server: S3Server
    name: str

    def url(self, key: str = "") -> str:
        return f"s3://{self.name}/{key}" if key else f"s3://{self.name}"

    @property
    def storage_options(self) -> dict[str, Any]:
        return self.server.storage_options

    def keys(self, prefix: str = "") -> list[str]:
        """Every object key in the bucket under ``prefix`` (through boto3, not cairn)."""
        client = self.server.client()
        keys: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=prefix):
            keys.extend(item["Key"] for item in page.get("Contents", []))
        return sorted(keys)

    def put(self, key: str, data: bytes) -> None:
        self.server.client().put_object(Bucket=self.name, Key=key, Body=data)
