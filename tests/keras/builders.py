"""A user's Keras model builder, named by import path in ``model={"keras_model": ...}``."""


def _seeded_trunk(obs_size, *, noisy):
    """keras, the ``"obs"`` Input and its seeded 16-unit hidden layer: relu, or with ``noisy``
    tanh followed by BatchNormalization ("bn") and Dropout, layers whose output depends on
    Keras' ``training`` argument (Keras reads no torch mode)."""
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()
    obs = keras.Input((obs_size,), name="obs")
    x = keras.layers.Dense(16, activation="tanh" if noisy else "relu",
                           kernel_initializer=keras.initializers.GlorotUniform(seed=1))(obs)
    if noisy:
        x = keras.layers.Dropout(0.5, seed=4)(keras.layers.BatchNormalization(name="bn")(x))
    return keras, obs, x


def _seeded_dense(keras, x, units, seed):
    return keras.layers.Dense(units, kernel_initializer=keras.initializers.GlorotUniform(seed=seed))(x)


def _seeded_actor_critic(obs_size, num_outputs, *, noisy):
    keras, obs, x = _seeded_trunk(obs_size, noisy=noisy)
    logits = _seeded_dense(keras, x, num_outputs, seed=2)
    return keras.Model(obs, [logits, _seeded_dense(keras, x, 1, seed=3)])


def _seeded_q_network(obs_size, num_actions, *, noisy):
    keras, obs, x = _seeded_trunk(obs_size, noisy=noisy)
    return keras.Model(obs, _seeded_dense(keras, x, num_actions, seed=2))


def small_actor_critic(obs_size, num_outputs, model_config):
    return _seeded_actor_critic(obs_size, num_outputs, noisy=False)


def not_a_model(obs_size, num_outputs, model_config):
    return "nope"


def small_q_network(obs_size, num_actions, model_config):
    return _seeded_q_network(obs_size, num_actions, noisy=False)


def wide_actor_critic(obs_size, num_outputs, model_config):
    """Two logits too many (issue 36 item 7: refused when the policy is built)."""
    return small_actor_critic(obs_size, num_outputs + 2, model_config)


def wide_q_network(obs_size, num_actions, model_config):
    """One Q-value too many."""
    return small_q_network(obs_size, num_actions + 1, model_config)


def noisy_actor_critic(obs_size, num_outputs, model_config):
    """small_actor_critic with BatchNormalization ("bn") and Dropout, after a tanh layer."""
    return _seeded_actor_critic(obs_size, num_outputs, noisy=True)


def noisy_q_network(obs_size, num_actions, model_config):
    """small_q_network with BatchNormalization ("bn") and Dropout, after a tanh layer."""
    return _seeded_q_network(obs_size, num_actions, noisy=True)


def _heads(keras, x, num_outputs):
    return [keras.layers.Dense(num_outputs)(x), keras.layers.Dense(1)(x)]


def int_input_actor_critic(obs_size, num_outputs, model_config):
    """An integer Input: Keras casts cairn's float observations to it, 0.7 -> 0, without a word."""
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()
    obs = keras.Input((obs_size,), dtype="int32")
    return keras.Model(obs, _heads(keras, keras.layers.Dense(16, activation="tanh")(obs), num_outputs))


def int_input_q_network(obs_size, num_actions, model_config):
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()
    obs = keras.Input((obs_size,), dtype="int32")
    return keras.Model(obs, keras.layers.Dense(num_actions)(keras.layers.Dense(16, activation="tanh")(obs)))


def two_input_actor_critic(obs_size, num_outputs, model_config):
    """Two inputs (as for a Dict observation's parts): cairn feeds one flattened row."""
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()
    a, b = keras.Input((2,)), keras.Input((obs_size - 2,))
    x = keras.layers.Dense(16, activation="tanh")(keras.layers.Concatenate()([a, b]))
    return keras.Model([a, b], _heads(keras, x, num_outputs))


def wrong_width_actor_critic(obs_size, num_outputs, model_config):
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()
    obs = keras.Input((obs_size + 3,))
    return keras.Model(obs, _heads(keras, keras.layers.Dense(16, activation="tanh")(obs), num_outputs))


def subclassed_actor_critic(obs_size, num_outputs, model_config):
    """A subclassed keras.Model: no inputs or outputs until it is called."""
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()

    class ActorCritic(keras.Model):
        def __init__(self):
            super().__init__()
            self.trunk = keras.layers.Dense(16, activation="tanh")
            self.logits = keras.layers.Dense(num_outputs)
            self.value = keras.layers.Dense(1)

        def call(self, x):
            h = self.trunk(x)
            return self.logits(h), self.value(h)

    return ActorCritic()


def unbuilt_sequential_q_network(obs_size, num_actions, model_config):
    """A Sequential without keras.Input: no variables until it is first called."""
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()
    return keras.Sequential([keras.layers.Dense(16, activation="relu"), keras.layers.Dense(num_actions)])


def wide_value_actor_critic(obs_size, num_outputs, model_config):
    """Two values per row."""
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()
    obs = keras.Input((obs_size,))
    x = keras.layers.Dense(16, activation="tanh")(obs)
    return keras.Model(obs, [keras.layers.Dense(num_outputs)(x), keras.layers.Dense(2)(x)])


_CACHE = {}


def cached_actor_critic(obs_size, num_outputs, model_config):
    """Returns the model it built on its first call again: every policy would hold the same variables."""
    if "model" not in _CACHE:
        _CACHE["model"] = small_actor_critic(obs_size, num_outputs, model_config)
    return _CACHE["model"]


def unseeded_noisy_actor_critic(obs_size, num_outputs, model_config):
    """Keras' defaults: unseeded initializers and an unseeded GaussianNoise, which Keras seeds
    from Python's ``random`` when they are built, and an unseeded Dropout (torch's generator)."""
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()
    obs = keras.Input((obs_size,))
    x = keras.layers.GaussianNoise(0.3)(keras.layers.Dense(16, activation="tanh")(obs))
    x = keras.layers.Dropout(0.25)(x)
    return keras.Model(obs, _heads(keras, x, num_outputs))


def unseeded_q_network(obs_size, num_actions, model_config):
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()
    obs = keras.Input((obs_size,))
    return keras.Model(obs, keras.layers.Dense(num_actions)(keras.layers.Dense(16, activation="tanh")(obs)))


_LAYER_CLASSES = {}


def _unseeded_noise_layer(keras):
    """A custom layer adding ``keras.random.normal(shape)`` (no ``seed``: Keras' process-wide
    global ``SeedGenerator``) to its input in training, registered so that model.keras holds it."""
    if "noise" not in _LAYER_CLASSES:
        @keras.saving.register_keras_serializable(package="cairn_tests")
        class UnseededNoise(keras.layers.Layer):
            def call(self, x, training=False):
                return x + 0.5 * keras.random.normal(keras.ops.shape(x)) if training else x

        _LAYER_CLASSES["noise"] = UnseededNoise
    return _LAYER_CLASSES["noise"]


def global_noise_actor_critic(obs_size, num_outputs, model_config):
    """Every kind of Keras randomness in training: an unseeded Dropout (torch's generator), a
    seeded one and a GaussianNoise (their own SeedGenerators, variables of the model), and a
    custom layer drawing from Keras' global SeedGenerator (``keras.random.normal(shape)``)."""
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()
    obs = keras.Input((obs_size,))
    x = keras.layers.Dense(16, activation="tanh")(obs)
    x = keras.layers.Dropout(0.25, seed=5)(keras.layers.Dropout(0.25)(keras.layers.GaussianNoise(0.3)(x)))
    x = _unseeded_noise_layer(keras)()(x)
    return keras.Model(obs, _heads(keras, x, num_outputs))


def global_draw_initialized_actor_critic(obs_size, num_outputs, model_config):
    """A hidden layer whose initializer draws ``keras.random.normal(shape)`` (no ``seed``: Keras'
    global ``SeedGenerator``) when the builder builds it."""
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()

    def initializer(shape, dtype=None):
        return keras.random.normal(shape, dtype=dtype)

    obs = keras.Input((obs_size,))
    x = keras.layers.Dense(16, activation="tanh", kernel_initializer=initializer)(obs)
    return keras.Model(obs, _heads(keras, x, num_outputs))


def global_noise_q_network(obs_size, num_actions, model_config):
    """global_noise_actor_critic's layers in a Q-network (DQN)."""
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()
    obs = keras.Input((obs_size,))
    x = keras.layers.Dense(16, activation="tanh")(obs)
    x = keras.layers.Dropout(0.25, seed=5)(keras.layers.Dropout(0.25)(keras.layers.GaussianNoise(0.3)(x)))
    x = _unseeded_noise_layer(keras)()(x)
    return keras.Model(obs, keras.layers.Dense(num_actions)(x))


def float32_heads_actor_critic(obs_size, num_outputs, model_config):
    """``small_actor_critic`` with float32 output layers: under a mixed dtype policy its hidden
    layer computes in the policy's dtype and its outputs stay float32."""
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()
    obs = keras.Input((obs_size,), name="obs")
    x = keras.layers.Dense(16, activation="relu")(obs)
    return keras.Model(obs, [keras.layers.Dense(num_outputs, dtype="float32")(x),
                             keras.layers.Dense(1, dtype="float32")(x)])
