"""The observation encoders of :mod:`cairn.policy.encoders` as Keras 3 layers (torch backend).

:func:`build_keras_encoder` reads the same :func:`~cairn.policy.encoders.encoder_description`
as :class:`~cairn.policy.encoders.ObservationEncoder` and makes the same network from built-in
Keras layers: each image part is cut from the flat processed row, reshaped to ``C x H x W``
(``Reshape``, and ``Permute`` for ``H x W x C`` images), scaled (``Rescaling``, 1/255 for
uint8 pixels), convolved (``Conv2D``, valid padding, the description's filters, kernels,
strides and activation), flattened and passed through the dense layer (``Dense``); flat parts
pass on as they are, and the pieces are concatenated in row order (``Concatenate``).

The convolutions are ``channels_first``, the layout torch convolves in: the flattened
features come out in torch's ``C, H, W`` order, so every weight has the torch encoder's meaning
(a Keras conv kernel ``[kh, kw, in, out]`` is the torch weight ``[out, in, kh, kw]``
transposed), the same generator draws give the same network, and the Keras torch backend runs
``torch.conv2d`` without transposing inputs. TensorFlow's CPU kernels without oneDNN have no
``channels_first`` convolution, so the files TensorFlow may serve (``model.keras``, the
SavedModel) run these convolutions ``channels_last`` (:mod:`cairn.export.keras_serving`).

:class:`KerasEncoder` holds the layers: calling it on a Keras tensor adds them to a functional
model (what ``model.keras`` and the exports hold); :meth:`KerasEncoder.call` runs each layer's
own ``call`` on torch tensors, in the same order, for cairn's training and acting path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any

import torch
from torch import nn

from cairn.policy.keras_backend import import_keras

__all__ = ["KerasEncoder", "KerasImageCNN", "build_keras_encoder", "keras_variable", "layers_in"]


def keras_variable(layer: Any, name: str) -> torch.Tensor:
    """The torch tensor of a Keras layer's variable ``name`` (``"kernel"``, ``"bias"``)."""
    return getattr(layer, name).value  # type: ignore[no-any-return]


@dataclass(frozen=True)
class KerasImageCNN:
    """The Keras layers of one image part, in call order: ``prepare`` (Reshape, Permute,
    Rescaling: flat pixels to scaled ``C x H x W``), ``convs``, ``flatten``, ``dense``."""

    prepare: tuple[Any, ...]
    convs: tuple[Any, ...]
    flatten: Any
    dense: Any | None

    @property
    def layers(self) -> tuple[Any, ...]:
        """Every layer, in call order."""
        return (*self.prepare, *self.convs, self.flatten, *(() if self.dense is None else (self.dense,)))

    def call(self, x: torch.Tensor) -> torch.Tensor:
        """Each layer's own ``call`` on ``x`` (flat pixels ``[batch, H*W*C]``)."""
        for layer in self.prepare:
            x = layer.call(x)
        # Logically still NCHW; oneDNN's CPU convolutions run faster on NHWC memory (as in
        # cairn.policy.encoders), and the values are the same.
        x = x.contiguous(memory_format=torch.channels_last)
        for layer in self.convs:
            x = layer.call(x)
        x = self.flatten.call(x)
        return x if self.dense is None else self.dense.call(x)


@dataclass(frozen=True)
class KerasEncoder:
    """An encoder's Keras layers: ``slices`` (``(offset, size)`` of each part of the flat row,
    in order) and ``images`` (part index -> its :class:`KerasImageCNN`; other parts pass on),
    ``concat`` (the ``Concatenate`` layer; None for one image part covering the whole row)."""

    slices: tuple[tuple[int, int], ...]
    images: Mapping[int, KerasImageCNN]
    concat: Any | None
    output_size: int

    def __call__(self, obs: Any) -> Any:
        """The encoder applied to the Keras tensor ``obs`` (building a functional model)."""
        if self.concat is None:
            return _symbolic(self.images[0], obs)
        pieces = []
        for i, (offset, size) in enumerate(self.slices):
            piece = obs[:, offset: offset + size]
            pieces.append(_symbolic(self.images[i], piece) if i in self.images else piece)
        return self.concat(pieces)

    def call(self, obs: torch.Tensor) -> torch.Tensor:
        """The encoder on a torch batch ``[batch, input_size]``, layer by layer (each Keras
        layer's own ``call``, without ``Layer.__call__``'s bookkeeping)."""
        if self.concat is None:
            return self.images[0].call(obs)
        pieces = []
        for i, (offset, size) in enumerate(self.slices):
            piece = obs[:, offset: offset + size]
            pieces.append(self.images[i].call(piece) if i in self.images else piece)
        return torch.cat(pieces, dim=1)

    @property
    def weight_layers(self) -> tuple[Any, ...]:
        """The Conv2D and Dense layers in the torch encoder's parameter order."""
        return tuple(layer for i in sorted(self.images) for layer in
                     (*self.images[i].convs,
                      *(() if self.images[i].dense is None else (self.images[i].dense,))))

    def reset_parameters(self, generator: torch.Generator, *, orthogonal: bool) -> None:
        """:meth:`ObservationEncoder.reset_parameters
        <cairn.policy.encoders.ObservationEncoder.reset_parameters>`
        on the Keras layers: the same draws from ``generator`` in the same order (each weight
        drawn in torch's ``[out, in, ...]`` shape, then transposed into Keras' layout), so both
        encoders start equal. ``orthogonal``: gain sqrt(2), zero biases; else PyTorch's
        default uniform initialisation."""
        with torch.no_grad():
            for layer in self.weight_layers:
                kernel, bias = keras_variable(layer, "kernel"), keras_variable(layer, "bias")
                # Keras: [kh, kw, in, out] or [in, out]; torch: [out, in, kh, kw] or [out, in].
                order = (3, 2, 0, 1) if kernel.dim() == 4 else (1, 0)
                weight = torch.empty(kernel.permute(*order).shape)
                if orthogonal:
                    nn.init.orthogonal_(weight, gain=2**0.5, generator=generator)
                    bias.zero_()
                    kernel.copy_(_to_keras(weight))
                else:
                    bound = 1.0 / float(weight[0].numel()) ** 0.5
                    weight.uniform_(-bound, bound, generator=generator)
                    kernel.copy_(_to_keras(weight))
                    bias.uniform_(-bound, bound, generator=generator)


def layers_in(value: Any, network: Any) -> Any:
    """``value`` (a Keras layer, or a tuple, mapping or dataclass holding layers beside other
    values, e.g. a :class:`KerasEncoder`) with each layer replaced by the layer of the same name
    in ``network``: a copy of the model the layers were built into (``copy.deepcopy`` copies
    Keras models by config, so the copy's layers are new objects)."""
    if isinstance(value, import_keras().layers.Layer):
        return network.get_layer(value.name)
    if isinstance(value, tuple):
        return tuple(layers_in(item, network) for item in value)
    if isinstance(value, Mapping):
        return {key: layers_in(item, network) for key, item in value.items()}
    if is_dataclass(value) and not isinstance(value, type):
        return replace(value, **{f.name: layers_in(getattr(value, f.name), network) for f in fields(value)})
    return value


def _to_keras(weight: torch.Tensor) -> torch.Tensor:
    return weight.permute(2, 3, 1, 0) if weight.dim() == 4 else weight.T


def _symbolic(cnn: KerasImageCNN, x: Any) -> Any:
    for layer in cnn.layers:
        x = layer(x)
    return x


def _image_cnn(part: Mapping[str, Any], name: str, keras: Any) -> KerasImageCNN:
    layers = keras.layers
    channels, height, width = (int(d) for d in part["shape"])
    if part["layout"] == "HWC":  # the row holds H, W, C: cut it so, then move C first (torch's permute)
        prepare = [layers.Reshape((height, width, channels), name=f"{name}_reshape"),
                   layers.Permute((3, 1, 2), name=f"{name}_permute")]
    else:
        prepare = [layers.Reshape((channels, height, width), name=f"{name}_reshape")]
    scale = float(part["scale"])
    if scale != 1.0:
        prepare.append(layers.Rescaling(scale, name=f"{name}_scale"))
    activation = str(part["conv_activation"])  # relu, tanh, elu, silu: the same names in Keras
    convs = tuple(layers.Conv2D(int(out), int(kernel), strides=int(stride), padding="valid",
                                activation=activation, data_format="channels_first",
                                name=f"{name}_conv_{k}")
                  for k, (out, kernel, stride) in enumerate(part["conv_filters"]))
    # channels_last: flatten as stored (C, H, W, torch's order); "channels_first" would move C last.
    flatten = layers.Flatten(data_format="channels_last", name=f"{name}_flatten")
    dense = int(part["dense"])
    return KerasImageCNN(tuple(prepare), convs, flatten,
                         layers.Dense(dense, activation=activation, name=f"{name}_dense") if dense else None)


def build_keras_encoder(description: Mapping[str, Any], name: str = "encoder") -> KerasEncoder:
    """The Keras layers of the encoder ``description`` describes (not yet built: calling the
    result on a Keras tensor builds them). Layers are named ``<name>_<i>_conv_<k>``,
    ``<name>_<i>_dense``, ... for the image part at index ``i``, so their variables are
    ``<name>_<i>_conv_<k>_kernel`` etc. in the policy's weights.

    >>> import gymnasium as gym, numpy as np
    >>> from cairn.policy.encoders import encoder_description
    >>> space = gym.spaces.Box(0, 255, (1, 16, 16), np.uint8)
    >>> description = encoder_description(space, {"conv_filters": [[4, 4, 2]], "conv_dense": 8})
    >>> encoder = build_keras_encoder(description)
    >>> [layer.name for layer in encoder.weight_layers]
    ['encoder_0_conv_0', 'encoder_0_dense']
    """
    keras = import_keras()
    parts: Sequence[Mapping[str, Any]] = description["parts"]
    images = {i: _image_cnn(part, f"{name}_{i}", keras)
              for i, part in enumerate(parts) if part["kind"] == "image"}
    whole = len(parts) == 1  # one image part covering the row: no slicing, no concatenation
    return KerasEncoder(tuple((int(p["offset"]), int(p["size"])) for p in parts), images,
                        None if whole else keras.layers.Concatenate(axis=-1, name=f"{name}_concat"),
                        int(description["output_size"]))
