"""``ops.traced_gradients``: the gradient functions ``tf.custom_gradient`` registers per trace are given back with
their model, and only theirs; a traced step keeps computing the right gradient after its entries are gone."""

from __future__ import annotations

import dataclasses
import gc

import numpy as np
import pytest
import tensorflow as tf

from ops import traced_gradients


@tf.custom_gradient
def clipped_sign(x):
    """sign(x) with the straight-through gradient clipped to |x| <= 1 (the STE of BinaryConnect)."""

    def grad(dy):
        return dy * tf.cast(tf.abs(x) <= 1.0, dy.dtype)

    return tf.sign(x), grad


def _registry() -> dict:
    return traced_gradients._registry()


def _traced_step(scale: tf.Variable):
    """A tf.function whose gradient through ``clipped_sign`` is built inside its trace (as in Keras's train step)."""

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(clipped_sign(scale * x))
        return tape.gradient(y, x)

    return step


def _reference(scale: float, x: np.ndarray) -> np.ndarray:
    return scale * (np.abs(scale * x) <= 1.0)  # d/dx sign(scale x) through the clipped STE


X = np.array([-2.0, -1.0, -0.25, 0.0, 0.5, 1.0, 1.5], np.float32)  # the clipping boundary |x| = 1 and 0 included


def test_release_removes_the_entries_of_graphs_over_the_given_variables_and_only_those():
    registry = _registry()
    assert registry is not None  # this TensorFlow has the registry the module cleans
    mine, theirs = tf.Variable(1.0), tf.Variable(0.5)
    before = set(registry)
    my_step, their_step = _traced_step(mine), _traced_step(theirs)
    np.testing.assert_allclose(my_step(tf.constant(X)).numpy(), _reference(1.0, X))
    np.testing.assert_allclose(their_step(tf.constant(X)).numpy(), _reference(0.5, X))
    added = {name for name in registry if name not in before}
    assert len(added) == 2 and all(name.startswith(traced_gradients.CUSTOM_GRADIENT_PREFIX) for name in added)
    owned = traced_gradients.owned_by([mine])
    assert len(owned) == 1 and set(owned) < added
    assert traced_gradients.release([mine]) == 1
    assert set(owned).isdisjoint(registry) and (added - set(owned)) <= set(registry)  # the other model's entry stays
    assert traced_gradients.release([mine]) == 0  # nothing left of it
    assert traced_gradients.release([tf.Variable(3.0)]) == 0  # a variable no graph captured
    # both traced steps still compute the right gradients: they were built when the steps were traced
    mine.assign(2.0)
    np.testing.assert_allclose(my_step(tf.constant(X)).numpy(), _reference(2.0, X))
    np.testing.assert_allclose(their_step(tf.constant(X)).numpy(), _reference(0.5, X))
    traced_gradients.release([theirs])


@pytest.mark.slow  # trains two sessions
def test_a_discarded_training_session_gives_its_traced_gradients_back_and_a_live_one_keeps_training():
    from explorer import state as url_state
    from explorer.train import trainer as train

    op = url_state.DEFAULT_OP
    runs = (train.Run(op, None, "custom"), train.Run(op, None, "true"))
    state = dataclasses.replace(url_state.TrainState(), runs=runs, epochs=20)
    registry = _registry()
    gc.collect()
    before = set(registry)
    live = train.Session(state)
    live.train_to(5)
    lives = set(registry) - before
    assert lives  # tf.custom_gradient registered its traces
    for _ in range(3):
        known = set(registry)
        discarded = train.Session(state)
        discarded.train_to(5)
        added = set(registry) - known
        assert added
        del discarded
        gc.collect()
        assert added.isdisjoint(registry) and lives <= set(registry)  # given back; the live session's entries kept
    live.train_to(10)  # the live session goes on: same numbers as a session trained straight to epoch 10
    fresh = train.Session(state)
    fresh.train_to(10)
    for got, want in zip(live.results(), fresh.results(), strict=True):
        np.testing.assert_allclose(got.history["loss"].to_numpy(), want.history["loss"].to_numpy(), rtol=1e-6)
    del live, fresh
    gc.collect()
    assert lives.isdisjoint(registry)


def test_without_the_private_registry_nothing_is_removed(monkeypatch):
    monkeypatch.setattr(traced_gradients, "_registry", lambda: None)
    assert traced_gradients.release([tf.Variable(1.0)]) == 0
    assert traced_gradients.owned_by([tf.Variable(1.0)]) == []


def test_a_graph_is_found_through_nested_closures_down_to_the_depth_given():
    from tensorflow.python.framework.func_graph import FuncGraph

    graph = FuncGraph("traced")
    with graph.as_default():
        tensor = tf.constant(1.0)

    def inner():
        return tensor

    def outer():
        return inner

    assert traced_gradients._graph_in(inner, 1) is graph
    assert traced_gradients._graph_in(outer, 2) is graph
    assert traced_gradients._graph_in(outer, 1) is None  # the tensor is two closures down
    assert traced_gradients._graph_in([0, (outer,)], 4) is graph
    assert traced_gradients._graph_in(tf.constant(1.0), 4) is None  # an eager tensor is in no graph to free
