"""A user's Keras model builder, named by import path in ``model={"keras_model": ...}``."""


def small_actor_critic(obs_size, num_outputs, model_config):
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()
    obs = keras.Input((obs_size,), name="obs")
    x = keras.layers.Dense(16, activation="relu",
                           kernel_initializer=keras.initializers.GlorotUniform(seed=1))(obs)
    logits = keras.layers.Dense(num_outputs, kernel_initializer=keras.initializers.GlorotUniform(seed=2))(x)
    value = keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(seed=3))(x)
    return keras.Model(obs, [logits, value])


def not_a_model(obs_size, num_outputs, model_config):
    return "nope"


def small_q_network(obs_size, num_actions, model_config):
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()
    obs = keras.Input((obs_size,), name="obs")
    x = keras.layers.Dense(16, activation="relu",
                           kernel_initializer=keras.initializers.GlorotUniform(seed=1))(obs)
    q_values = keras.layers.Dense(num_actions, kernel_initializer=keras.initializers.GlorotUniform(seed=2))(x)
    return keras.Model(obs, q_values)


def wide_actor_critic(obs_size, num_outputs, model_config):
    """Two logits too many (issue 36 item 7: refused when the policy is built)."""
    return small_actor_critic(obs_size, num_outputs + 2, model_config)


def wide_q_network(obs_size, num_actions, model_config):
    """One Q-value too many."""
    return small_q_network(obs_size, num_actions + 1, model_config)


def noisy_actor_critic(obs_size, num_outputs, model_config):
    """small_actor_critic with BatchNormalization ("bn") and Dropout: layers whose output
    depends on Keras' ``training`` argument (Keras reads no torch mode)."""
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()
    obs = keras.Input((obs_size,), name="obs")
    x = keras.layers.Dense(16, activation="tanh",
                           kernel_initializer=keras.initializers.GlorotUniform(seed=1))(obs)
    x = keras.layers.Dropout(0.5, seed=4)(keras.layers.BatchNormalization(name="bn")(x))
    logits = keras.layers.Dense(num_outputs, kernel_initializer=keras.initializers.GlorotUniform(seed=2))(x)
    value = keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(seed=3))(x)
    return keras.Model(obs, [logits, value])


def noisy_q_network(obs_size, num_actions, model_config):
    """small_q_network with BatchNormalization ("bn") and Dropout."""
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()
    obs = keras.Input((obs_size,), name="obs")
    x = keras.layers.Dense(16, activation="tanh",
                           kernel_initializer=keras.initializers.GlorotUniform(seed=1))(obs)
    x = keras.layers.Dropout(0.5, seed=4)(keras.layers.BatchNormalization(name="bn")(x))
    q_values = keras.layers.Dense(num_actions, kernel_initializer=keras.initializers.GlorotUniform(seed=2))(x)
    return keras.Model(obs, q_values)
