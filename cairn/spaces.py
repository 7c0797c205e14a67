"""How cairn's policies read Gymnasium spaces: which action spaces they act in, which Box is an
image, and the conversion of observations into the float rows a network takes
(:class:`ObservationPreprocessor`). Spaces as JSON data: :mod:`cairn.space_json`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from cairn.errors import ObservationSpaceError
from cairn.space_json import MAX_SPACE_DEPTH

__all__ = [
    "ObservationPreprocessor",
    "check_action_space",
    "float32_bounds",
    "is_image_space",
    "ObservationKind",
    "observation_kind",
]

MIN_IMAGE_SIDE = 8  # smaller "images" (MiniGrid's 7x7 cells) are fine as MLP inputs
_IMAGE_CHANNELS = (1, 3, 4)  # grey, RGB, RGBA (or 4 stacked grey frames)
_SUPPORTED_ACTION_SPACES = (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.Box)


def check_action_space(space: gym.Space[Any]) -> None:
    """Raise ValueError unless cairn's policies can act in ``space``."""
    if not isinstance(space, _SUPPORTED_ACTION_SPACES):
        raise ValueError(
            f"Unsupported action space {space!r}: cairn policies act in Discrete, "
            f"MultiDiscrete and Box spaces. Fix: wrap the environment to use one of them "
            f"({_action_space_fix(space)})."
        )
    if isinstance(space, gym.spaces.Box) and not np.issubdtype(space.dtype, np.floating):
        raise ValueError(
            f"Box action spaces must have a float dtype, got {space!r}. Fix: for integer actions "
            "use a MultiDiscrete space (nvec = high - low + 1, start = low) in an action wrapper, "
            "or a float Box whose actions the wrapper rounds."
        )
    if isinstance(space, gym.spaces.Box):
        low, high = float32_bounds(space)
        if np.any(low > high):  # clipped to [low, high], an action would lie outside the Box
            i = int(np.flatnonzero(low > high)[0])
            entry = tuple(int(j) for j in np.unravel_index(i, space.shape))
            bounds = float(space.low.reshape(-1)[i]), float(space.high.reshape(-1)[i])
            raise ValueError(
                f"Box action space {space!r}: its entry {entry} lies in "
                f"[{bounds[0]!r}, {bounds[1]!r}], which holds no "
                "float32 number; cairn's policies compute actions in float32 and clip them to the "
                "bounds, so no action they give would lie in the space. Fix: widen the bounds to "
                "hold a float32 number (or bounds float32 holds exactly, such as 0.0), or fix the "
                "entry in a wrapper and leave it out of the action space.")


def _action_space_fix(space: gym.Space[Any]) -> str:
    """How to express ``space`` (an action space cairn's policies cannot act in) as one they can."""
    if isinstance(space, gym.spaces.MultiBinary):
        return f"MultiBinary{space.shape} is MultiDiscrete(np.full({space.shape}, 2))"
    if isinstance(space, (gym.spaces.Tuple, gym.spaces.Dict)):
        return ("a Tuple or Dict of discrete parts is one MultiDiscrete of their sizes, of Box parts "
                "one flat Box; independent sub-actions are what cairn's distributions assume")
    return "e.g. an index into a list of actions as a Discrete"


def float32_bounds(space: gym.spaces.Box) -> tuple[np.ndarray, np.ndarray]:
    """``space``'s bounds as flat float32 arrays, each rounded towards the inside of the Box.

    Actions are float32 and are clipped to these, then cast to the space's dtype: a float64
    bound that float32 cannot hold (0.1) rounded to the nearest float32 (0.10000000149...)
    would let a clipped action out of the space. Rounded inwards, every clipped action lies
    in the space (a float32 space's bounds are kept exactly; a bound beyond the float32 range
    becomes the largest finite float32).
    """
    low64 = space.low.reshape(-1).astype(np.float64)
    high64 = space.high.reshape(-1).astype(np.float64)
    with np.errstate(over="ignore"):  # a float64 bound beyond the float32 range: +-inf, then inwards
        low, high = low64.astype(np.float32), high64.astype(np.float32)
    low = np.where(low < low64, np.nextafter(low, np.float32(np.inf)), low).astype(np.float32)
    high = np.where(high > high64, np.nextafter(high, np.float32(-np.inf)), high).astype(np.float32)
    return low, high


def is_image_space(space: gym.Space[Any]) -> bool:
    """True when ``space`` is a Box that holds images rather than a vector of features.

    The rule: a Box with two spatial axes of at least :data:`MIN_IMAGE_SIDE` each, and either

    * rank 3 with a channel axis of 1, 3 or 4 at one end, ``(H, W, C)`` or ``(C, H, W)``, of any
      dtype (wrappers often rescale pixels to floats), or
    * dtype ``uint8`` and rank 2 or more (grey frames ``(84, 84)``, frame stacks).

    >>> import numpy as np
    >>> is_image_space(gym.spaces.Box(0, 255, (84, 84, 3), np.uint8))
    True
    >>> is_image_space(gym.spaces.Box(-1.0, 1.0, (4,)))
    False
    """
    if not isinstance(space, gym.spaces.Box) or len(space.shape) < 2:
        return False
    shape = space.shape
    if len(shape) == 3:
        channels_last = shape[2] in _IMAGE_CHANNELS and min(shape[:2]) >= MIN_IMAGE_SIDE
        channels_first = shape[0] in _IMAGE_CHANNELS and min(shape[1:]) >= MIN_IMAGE_SIDE
        if channels_last or channels_first:
            return True
    large_axes = sum(1 for d in shape if d >= MIN_IMAGE_SIDE)
    return np.dtype(space.dtype) == np.uint8 and large_axes >= 2


#: How observations of a space become a policy's float input row (see :func:`observation_kind`).
ObservationKind = Literal["array", "discrete", "flattened"]


def observation_kind(space: gym.Space[Any]) -> ObservationKind:
    """The one switch over observation spaces: how an observation of ``space`` is read.

    * ``"array"``: Box and MultiBinary, an array of the space's shape, flattened as it is;
    * ``"discrete"``: Discrete, an int in ``[start, start + n)``, one-hot encoded;
    * ``"flattened"``: Dict, Tuple and MultiDiscrete, through :func:`gymnasium.spaces.flatten`.

    Raises ValueError for a space cairn's policies cannot read.

    >>> observation_kind(gym.spaces.Discrete(3))
    'discrete'
    """
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return "array"
    if isinstance(space, gym.spaces.Discrete):
        return "discrete"
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        _check_nested_parts(space, "obs", 0)
        return "flattened"
    if isinstance(space, gym.spaces.MultiDiscrete):
        return "flattened"
    raise ValueError(
        f"Unsupported observation space {space!r}: cairn policies read Box, "
        "Discrete, MultiDiscrete, MultiBinary, Dict and Tuple observations."
    )


def _check_nested_parts(space: Any, path: str, depth: int) -> None:
    """Raise ValueError naming the first part of a Dict/Tuple space a policy cannot read."""
    if depth > MAX_SPACE_DEPTH:
        raise ValueError(f"Unsupported observation space: {path} nests Dict/Tuple spaces deeper than "
                         f"{MAX_SPACE_DEPTH} levels. Flatten it in a wrapper.")
    parts = space.spaces
    for key, sub in (parts.items() if isinstance(space, gym.spaces.Dict) else enumerate(parts)):
        where = f"{path}[{key!r}]"
        if isinstance(sub, (gym.spaces.Dict, gym.spaces.Tuple)):
            _check_nested_parts(sub, where, depth + 1)
        elif not isinstance(sub, (gym.spaces.Box, gym.spaces.MultiBinary, gym.spaces.Discrete,
                                  gym.spaces.MultiDiscrete)):
            raise ValueError(
                f"Unsupported observation space: its part {where} is {sub!r}; cairn policies "
                "read Box, Discrete, MultiDiscrete and MultiBinary parts inside Dict and Tuple "
                "observations. Fix: encode it as one of those in a wrapper (e.g. Text as token ids in "
                "a MultiDiscrete), or drop it with gymnasium.wrappers.FilterObservation."
            )


def _has_checked_parts(space: gym.Space[Any]) -> bool:
    """Whether ``space`` has parts whose values :func:`_parts_fit` checks: Discrete and
    MultiDiscrete ones, and integer Box and MultiBinary ones."""
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return True
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return not np.issubdtype(space.dtype, np.floating)
    if isinstance(space, gym.spaces.Dict):
        return any(map(_has_checked_parts, space.spaces.values()))
    return isinstance(space, gym.spaces.Tuple) and any(map(_has_checked_parts, space.spaces))


def _parts_fit(space: gym.Space[Any], obs: Any) -> bool:
    """Whether every Discrete and MultiDiscrete value in ``obs`` (an observation that
    :func:`gymnasium.spaces.flatten` took) lies in its ``[start, start + n)``, and every value
    of an integer Box or MultiBinary part is one its dtype holds (flatten casts the part to it:
    0.7 would be read as 0, 300 in an int8 part as 44); float Box parts are not checked."""
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        if np.issubdtype(space.dtype, np.floating):
            return True
        values = np.asarray(obs)
        if values.dtype == space.dtype:
            return True
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # NaN or inf cast to an integer
            cast = values.astype(space.dtype)
        return bool(np.array_equal(cast, values))
    if isinstance(space, gym.spaces.Discrete):
        return bool(space.start <= int(obs) < space.start + space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        values = np.asarray(obs)
        return bool(np.all(values >= space.start) and np.all(values < space.start + space.nvec))
    if isinstance(space, gym.spaces.Dict):
        return all(_parts_fit(sub, obs[key]) for key, sub in space.spaces.items())
    if isinstance(space, gym.spaces.Tuple):
        return all(_parts_fit(sub, part) for sub, part in zip(space.spaces, obs, strict=True))
    return True


class ObservationPreprocessor:
    """Turns a batch of raw observations into a float32 matrix ``[batch, size]``.

    Box and MultiBinary observations are flattened, Discrete ones one-hot encoded, and Dict,
    Tuple and MultiDiscrete ones flattened the way :func:`gymnasium.spaces.flatten` does it.
    """

    def __init__(self, space: gym.Space[Any]) -> None:
        self.kind = observation_kind(space)
        self.space = space
        self.size = int(gym.spaces.flatdim(space))
        #: No action mask: the network reads the whole observation (cairn.policy.action_masking).
        self.mask_size = 0
        self.network_space = space
        self._array_like = self.kind == "array"
        # The shape one observation has: what each row of a batch must have (Discrete: ()).
        self._obs_shape: tuple[int, ...] = tuple(space.shape or ()) if self._array_like else ()
        self._start = int(space.start) if isinstance(space, gym.spaces.Discrete) else 0
        self._check_parts = self.kind == "flattened" and _has_checked_parts(space)

    def __call__(self, batch: Sequence[Any] | np.ndarray) -> np.ndarray:
        """``batch`` (a sequence or array of observations) -> ``float32 [len(batch), size]``.

        Raises :class:`~cairn.errors.ObservationSpaceError` when the observations do not fit
        the space. The sampling loop calls this every step, so the checks on the way are O(1)
        (a shape comparison); the costly diagnosis runs only once something did not fit.
        """
        if self._array_like:
            try:
                arr = np.asarray(batch, dtype=np.float32)
            except (ValueError, TypeError) as exc:  # ragged rows, or not numbers at all
                raise self._error(f"could not be read as one array of numbers ({exc})") from exc
            if arr.shape[1:] != self._obs_shape:
                if arr.ndim == 1 and arr.size == 0:  # an empty list: an empty batch
                    return np.zeros((0, self.size), dtype=np.float32)
                raise self._shape_error(arr.shape)
            return arr.reshape(arr.shape[0], self.size)
        if self.kind == "discrete":
            try:
                idx = np.asarray(batch, dtype=np.int64)
            except (ValueError, TypeError) as exc:
                raise self._error(f"could not be read as integers ({exc})") from exc
            if idx.ndim != 1:
                raise self._shape_error(idx.shape)
            values = batch if isinstance(batch, np.ndarray) else np.asarray(batch)
            # The cast to int64 cuts a fraction off: 2.7 was read as 2 (only floats are looked at).
            if values.dtype.kind == "f" and not np.array_equal(idx, values):
                raise self._error("hold values that are not whole numbers (a Discrete observation "
                                  "is an integer)")
            idx = idx - self._start
            out = np.zeros((idx.shape[0], self.size), dtype=np.float32)
            try:
                if idx.size and idx.min() < 0:  # numpy would index from the end: -1 as n - 1
                    raise IndexError(f"index {int(idx.min())} is below 0")
                out[np.arange(idx.shape[0]), idx] = 1.0
            except IndexError as exc:
                raise self._error(
                    f"hold values outside [{self._start}, {self._start + self.size - 1}] ({exc})"
                ) from exc
            return out
        try:
            rows = [np.asarray(gym.spaces.flatten(self.space, o), dtype=np.float32) for o in batch]
            out = np.stack(rows) if rows else np.zeros((0, self.size), dtype=np.float32)
        except (ValueError, TypeError, IndexError, KeyError, AttributeError, OverflowError) as exc:
            raise self._error(f"could not be flattened ({type(exc).__name__}: {exc})") from exc
        if out.shape != (len(rows), self.size):
            raise self._error(f"flattened to rows of shape {out.shape[1:]}, not ({self.size},)")
        # gymnasium.spaces.flatten writes a Discrete value's 1 unchecked: one below the range
        # lands at the end of its entries (a negative index), one above it in the next part's;
        # and it casts an integer part to its dtype, cutting fractions off and wrapping around.
        if self._check_parts and not all(_parts_fit(self.space, o) for o in batch):
            raise self._error("hold Discrete or MultiDiscrete values outside their ranges [start, "
                              "start + n), or values an integer Box or MultiBinary part cannot hold (a "
                              "fraction, NaN, or a number beyond its dtype) and flattening would change")
        return out

    def _error(self, problem: str) -> ObservationSpaceError:
        return ObservationSpaceError(
            f"Observations for the observation space {self.space} {problem}. Expected a batch "
            "of observations, each one in that space. Fix: pass observations of this space "
            "(compute_single_action takes one observation, compute_actions a batch of them); if "
            "they come from the environment itself, its observations disagree with its declared "
            "observation_space."
        )

    def _shape_error(self, got: tuple[int, ...]) -> ObservationSpaceError:
        """The message for a batch of shape ``got`` that does not fit the space."""
        expected = self._obs_shape
        batch_shape = "(N, " + ", ".join(str(d) for d in expected) + ")" if expected else "(N,)"
        found = (
            f"got a batch of shape {got}, i.e. observations of shape {got[1:]}"
            if got else "got a single value, not a batch"
        )
        hint = (f"give each observation the shape {expected}; if they come from the environment "
                "itself, its observations disagree with its declared observation_space (fix the "
                "env, or reshape them in a wrapper)")
        if got == expected:
            hint = ("this looks like one observation: use compute_single_action(obs), or "
                    "compute_actions([obs])")
        elif len(got) == len(expected) + 2 and got[0] == 1 and got[2:] == expected:
            hint = ("each entry looks like a batch itself: use compute_actions(batch) rather than "
                    "compute_single_action(batch)")
        return ObservationSpaceError(
            f"Observations do not fit the policy's observation space {self.space}: expected each "
            f"observation to have shape {expected} (a batch of shape {batch_shape}), but "
            f"{found}. Fix: {hint}."
        )
