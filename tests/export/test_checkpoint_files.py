"""``native_files_hold``: the one answer to whether an earlier checkpoint's native files are
what this process would write, for an incremental save (``cairn.registry.NATIVE_MODEL_REUSES``).
Each row tries one way a reuse could be wrong: a Keras record of the other ``full``, or ONNX
skipped for packages that this process has."""

from __future__ import annotations

import pytest

from cairn import registry
from cairn.export import checkpoint_files, onnx_model

_TORCH = {"status": "ok", "formats": ["torch", "onnx"], "opset": 18}
_KERAS_ALONE = {"status": "ok", "formats": ["keras"], "opset": None}
_KERAS_FULL = {"status": "ok", "formats": ["keras", "onnx"], "opset": 18}
_KERAS_UNINSTALLED = {"status": "ok", "formats": ["keras"], "opset": None,
                      "skipped": {"onnx": "not installed: onnxscript"}}
_KERAS_EXPORT_FAILED = {"status": "ok", "formats": ["keras"], "opset": None,
                        "skipped": {"onnx": "the exporter cannot convert this model"}}
_TORCH_UNINSTALLED = {"status": "ok", "formats": ["torch"], "opset": None,
                      "skipped": {"onnx": "not installed: onnx"}}
_FAILED = {"status": "failed", "reason": "cannot trace"}


@pytest.mark.parametrize(("record", "keras", "full", "holds_with_packages", "holds_without"), [
    (_FAILED, False, True, True, True),
    (_FAILED, True, False, True, True),
    (_TORCH, False, True, True, True),
    (_TORCH, False, False, True, True),  # a torch policy's files do not depend on full
    (_TORCH_UNINSTALLED, False, True, False, True),
    (_KERAS_ALONE, True, False, True, True),
    (_KERAS_ALONE, True, True, False, False),  # model.onnx is asked for, the record has none
    (_KERAS_FULL, True, True, True, True),
    (_KERAS_FULL, True, False, False, False),  # the record has model.onnx, this save would not
    (_KERAS_UNINSTALLED, True, True, False, True),
    (_KERAS_UNINSTALLED, True, False, False, False),
    (_KERAS_EXPORT_FAILED, True, True, True, True),
    (_KERAS_EXPORT_FAILED, True, False, False, False),
])
def test_native_files_hold(monkeypatch, record, keras, full, holds_with_packages, holds_without) -> None:
    reuses = registry.native_model_reuses()
    assert reuses is checkpoint_files.native_files_hold
    monkeypatch.setattr(onnx_model, "ONNX_PACKAGES", ("json",))  # importable everywhere
    assert reuses(record, keras=keras, full=full) is holds_with_packages
    monkeypatch.setattr(onnx_model, "ONNX_PACKAGES", ("json", "no_such_package_for_cairn"))
    assert reuses(record, keras=keras, full=full) is holds_without
