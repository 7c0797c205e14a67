"""Naming MuJoCo's OpenGL failures: which backend ``MUJOCO_GL`` chose, why it failed, the fix.

MuJoCo renders through the OpenGL backend that the ``MUJOCO_GL`` variable names when ``mujoco``
is first imported: ``glfw`` (the default: a window, so a display), ``egl`` (headless, through a
GPU driver's or Mesa's libEGL) or ``osmesa`` (headless, in software, through libOSMesa and
PyOpenGL). A wrong choice fails far from its cause: without a display, GLFW fails at the first
frame with ``mujoco.FatalError: an OpenGL platform library has not been loaded``; with
``MUJOCO_GL=osmesa`` and no libOSMesa, ``import mujoco`` itself (so creating any MuJoCo env)
fails with ``AttributeError: 'NoneType' object has no attribute 'glGetError'``.
:func:`mujoco_gl_problem` recognises these and says what to do instead.
"""

from __future__ import annotations

import os
import traceback

from cairn.errors import EnvError

__all__ = ["MujocoGLError", "mujoco_gl_problem"]


class MujocoGLError(EnvError):
    """MuJoCo could not set up the OpenGL backend that ``MUJOCO_GL`` asks for (a problem of
    this machine's setup, not of the environment, the checkpoint or the policy)."""


#: Where in a traceback MuJoCo's OpenGL backends fail: PyOpenGL, glfw, and MuJoCo's own
#: backend modules (``mujoco/egl``, ``mujoco/osmesa``, ``mujoco/glfw``, ``gl_context.py``).
_GL_CODE = ("/OpenGL/", "/glfw/", "/mujoco/egl/", "/mujoco/osmesa/", "/mujoco/glfw/", "/mujoco/cgl/",
            "gl_context.py")


def _from_gl_stack(exc: BaseException) -> bool:
    """Whether ``exc`` is MuJoCo's FatalError about OpenGL, or was raised in a backend's code
    reached from MuJoCo (importing ``mujoco`` loads the backend ``MUJOCO_GL`` names)."""
    if type(exc).__module__.startswith("mujoco") and "OpenGL" in str(exc):
        return True
    files = [frame.filename.replace("\\", "/") for frame in traceback.extract_tb(exc.__traceback__)]
    return (bool(files) and any("/mujoco/" in name for name in files)
            and any(part in files[-1] for part in _GL_CODE))


def mujoco_gl_problem(exc: BaseException) -> str | None:
    """What went wrong and the fix, when ``exc`` (or an exception it was raised from) is a
    failure of MuJoCo's OpenGL backend; None for any other error."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MujocoGLError):
            return str(current)
        if _from_gl_stack(current):
            return _describe(current)
        current = current.__cause__ or current.__context__
    return None


def _describe(exc: BaseException) -> str:
    """The message for a failure of the backend ``MUJOCO_GL`` names (or GLFW, the default)."""
    backend = os.environ.get("MUJOCO_GL", "").strip().lower()
    headless = ("MUJOCO_GL=egl (headless, through the libEGL of a GPU driver or of Mesa) or MUJOCO_GL=osmesa "
                "(headless, in software; needs libOSMesa and PyOpenGL: apt-get install libosmesa6)")
    if backend == "osmesa":
        return ("MuJoCo could not load OSMesa, the OpenGL backend that MUJOCO_GL=osmesa asks for "
                "(libOSMesa or PyOpenGL is missing). "
                "Fix: install them (apt-get install libosmesa6; pip install PyOpenGL), "
                "or use MUJOCO_GL=egl; where nothing is rendered, unset MUJOCO_GL.")
    if backend == "egl":
        found = " ".join(f"{type(exc).__name__}: {exc}".split())  # EGL's own words name the missing piece
        return (f"MuJoCo could not set up EGL, the OpenGL backend that MUJOCO_GL=egl asks for "
                f"({found:.300}). "
                "Fix: install libEGL (a GPU driver's, or Mesa's: apt-get install libegl1), "
                "or use MUJOCO_GL=osmesa (apt-get install libosmesa6; pip install PyOpenGL); "
                "where nothing is rendered, unset MUJOCO_GL.")
    chosen = f"MUJOCO_GL={backend}" if backend else "MUJOCO_GL is unset, so MuJoCo uses GLFW"
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        return (f"MuJoCo could not open an OpenGL context: {chosen}, which needs a display, "
                f"and there is none (DISPLAY is unset). Fix: set {headless}.")
    return (f"MuJoCo could not open an OpenGL context with {chosen}. "
            f"Fix: check the display's OpenGL driver, or set {headless}.")
