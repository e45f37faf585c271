"""The kinds of subject (gradcheck/kinds/): discovery gives each subject a registered kind, each kind answers
for a real subject of its kind (its config table, its signature for ``list``, what its backward functions owe,
the call target it builds), and a kind that is not registered cannot be had."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gradcheck.checking.build import build
from gradcheck.checking.request import CheckRequest
from gradcheck.config import Settings
from gradcheck.kinds import KINDS, kind_named
from gradcheck.subjects import Subject, find_subjects, subject_of
from tests.helpers import invoke, load_copy, write

MODULE = """
import keras
import tensorflow as tf


@tf.custom_gradient
def square(x):
    return x * x, lambda dy: dy * 2.0 * x


def _block(x):
    return tf.tanh(x) * x


recomputed = tf.recompute_grad(_block)


def nested_square(x):
    @tf.custom_gradient
    def inner(x):
        return x * x, lambda dy: dy * 2.0 * x

    return inner(x)


class Ops:
    def __init__(self, scale=2.0):
        self.scale = scale

    @tf.custom_gradient
    def scaled(self, x):
        return x * self.scale, lambda dy: dy * self.scale

    @staticmethod
    @tf.custom_gradient
    def tripled(x):
        return x * 3.0, lambda dy: dy * 3.0

    @classmethod
    def squared(cls, x):
        @tf.custom_gradient
        def inner(x):
            return x * x, lambda dy: dy * 2.0 * x

        return inner(x)


def _made(factor):
    return tf.custom_gradient(lambda *args: (factor * args[0], lambda dy: factor * dy))


doubled = _made(2.0)


def flipped(x):
    with tf.compat.v1.get_default_graph().gradient_override_map({"Identity": "Identity"}):
        return tf.identity(x)


class Squaring(keras.layers.Layer):
    def call(self, x):
        return square(x)


class Doubling(keras.layers.Layer):
    def call(self, x):
        @tf.custom_gradient
        def inner(x):
            return x * 2.0, lambda dy: dy * 2.0

        return inner(x)
"""

#: Each subject of MODULE: its kind, the target its check calls, and the answers that differ between kinds.
EXPECTED = {
    "square": ("function", "FunctionTarget", "functions", False, True),
    "recomputed": ("wrapper", "WrapperTarget", "functions", False, True),
    "nested_square": ("nested function", "NestedTarget", "functions", True, True),
    "Ops.scaled": ("method", "FunctionTarget", "functions", False, True),
    "Ops.tripled": ("staticmethod", "FunctionTarget", "functions", False, True),
    "Ops.squared": ("nested classmethod", "NestedTarget", "functions", True, True),
    "doubled": ("product", "FunctionTarget", "functions", False, True),
    "flipped": ("registered function", "RegisteredTarget", "functions", True, True),
    "Squaring": ("layer", "LayerTarget", "layers", True, False),
    "Doubling": ("nested layer", "NestedTarget", "layers", True, False),
}


@pytest.fixture(scope="module")
def subjects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Subject]:
    path = write(tmp_path_factory.mktemp("kinds"), "kinds_ops.py", MODULE)
    return {subject.name: subject for subject in find_subjects(load_copy(path), path)}


def _request(subject: Subject) -> CheckRequest:
    return CheckRequest(subject=subject, settings=Settings())


def test_discovery_gives_each_subject_a_registered_kind(subjects: dict[str, Subject]) -> None:
    assert {name: subject.kind.name for name, subject in subjects.items()} == {
        name: expected[0] for name, expected in EXPECTED.items()
    }
    assert all(KINDS[subject.kind.name] is subject.kind for subject in subjects.values())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_kind_answers_for_a_subject_of_its_kind(subjects: dict[str, Subject], name: str) -> None:
    subject = subjects[name]
    _, target, table, owes_received, in_float64 = EXPECTED[name]
    kind = subject.kind
    assert (kind.table, kind.reported) == (table, table.removesuffix("s"))
    assert (kind.owes_received, kind.references_in_float64) == (owes_received, in_float64)
    assert kind.shares_class_table == name.startswith("Ops.")
    # self and cls are bound by the check, not listed; a product's *args are probed as x
    assert str(kind.signature(subject)) == ("(*args)" if name == "doubled" else "(x)")
    built = build(_request(subject), "float64")
    assert type(built.target).__name__ == target
    assert built.plan.unknown == ("x",)


def test_a_method_is_bound_to_an_instance_built_from_init(subjects: dict[str, Subject]) -> None:
    import tensorflow as tf

    built = build(_request(subjects["Ops.scaled"]), "float64")
    result, _ = built.target.forward(tf.constant(5.0))
    assert float(result) == 10.0  # the default scale of an Ops() built for the check
    assert built.layer is None


def test_a_layer_is_built_fresh_from_its_class_and_taken_as_it_is_from_an_instance(
    subjects: dict[str, Subject],
) -> None:
    built = build(_request(subjects["Squaring"]), "float64")
    assert built.fresh_layer and type(built.layer).__name__ == "Squaring"
    given: Any = type(built.layer)()
    from_instance = subject_of(given)
    assert from_instance is not None and from_instance.kind is kind_named("layer")
    again = build(_request(from_instance), "float64")
    assert again.layer is given and not again.fresh_layer


def test_list_shows_each_kind_with_the_signature_of_its_call(tmp_path: Path) -> None:
    write(tmp_path, "kinds_ops.py", MODULE)
    write(tmp_path, "gradcheck.toml", "")
    listed = invoke("list", str(tmp_path / "kinds_ops.py")).stdout
    heads = [line for line in listed.splitlines() if "::" in line]
    assert [head.rsplit("::", 1)[1] for head in heads] == [
        "square(x)  [function]",
        "recomputed(x)  [function]",
        "nested_square(x)  [function]",
        "Ops.scaled(x)  [function]",
        "Ops.tripled(x)  [function]",
        "Ops.squared(x)  [function]",
        "doubled(*args)  [function]",
        "flipped(x)  [function]",
        "Squaring(x)  [layer]",
        "Doubling(x)  [layer]",
    ]


def test_a_kind_that_is_not_registered_cannot_be_had() -> None:
    with pytest.raises(LookupError, match=r"no kind of subject is named 'factory product'; the kinds are function, "):
        kind_named("factory product")
    assert "nested wrapper" not in KINDS  # a wrapper's backward function is TensorFlow's: nothing is nested
