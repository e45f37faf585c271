"""Probing: inputs found with no config for the signatures real code has (issue 10, item 3)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import gradcheck
from gradcheck import probing
from gradcheck.probing import Attempt, Guess, Search, hints_for, learn_from_error
from tests.helpers import FIXTURES, blamed, by_name, invoke, load_copy, run_json, write

SIGNATURES = FIXTURES / "probing" / "signatures.py"
SPECTRA = FIXTURES / "probing" / "spectra.py"


# -- what the code says (no TensorFlow) ----------------------------------------


def _function(source: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    return namespace["f"]


def test_docstring_shapes_in_the_three_usual_spellings() -> None:
    f = _function(
        "def f(x, y, n, other):\n"
        '    """Doc.\n\n'
        "    Args:\n"
        "      x: Tensor of shape `[batch, time, depth]`.\n"
        "      y: Floating-point `Tensor` of shape [B, T,\n"
        "        D], continued on a second line.\n"
        "      n: Tensor of shape `[n]`.\n"
        "      other: no shape here.\n"
        '    """\n'
    )
    hints = hints_for(f, ("x", "y", "n", "other"))
    assert hints["x"].shape == ("batch", "time", "depth")
    assert hints["y"].shape == ("B", "T", "D")
    assert hints["n"].shape == ("n",)
    assert hints["other"].shape is None


def test_documented_names_get_one_size_each_and_leading_ellipsis_is_dropped() -> None:
    f = _function(
        'def f(matrix, rhs):\n    """Solve.\n\n    Args:\n      matrix: `Tensor` of shape `[..., N, N]`.\n'
        '      rhs: `Tensor` of shape `[..., N, K]`.\n    """\n'
    )
    hints = hints_for(f, ("matrix", "rhs"))
    assert probing.documented_shapes(("matrix", "rhs"), hints) == ((3, 3), (3, 4))


@pytest.mark.parametrize("name", ["labels", "indices", "ids", "token_ids", "lengths", "label_length", "mask"])
def test_integer_names(name: str) -> None:
    assert hints_for(None, (name,))[name].integer


def test_integer_annotation_and_positive_names() -> None:
    f = _function("def f(steps: int, x: float, scale, concentration, loc): pass")
    hints = hints_for(f, ("steps", "x", "scale", "concentration", "loc"))
    assert hints["steps"].integer and not hints["x"].integer
    assert hints["scale"].positive and hints["concentration"].positive and not hints["loc"].positive


def test_positive_from_the_docstring() -> None:
    f = _function('def f(rate):\n    """Doc.\n\n    Args:\n      rate: the rate; must be positive.\n    """\n')
    assert hints_for(f, ("rate",))["rate"].positive
    g = _function('def f(w):\n    """Doc.\n\n    Args:\n      w: strictly positive weights.\n    """\n')
    assert hints_for(g, ("w",))["w"].positive


def test_integer_ranges_index_the_smallest_axis() -> None:
    assert probing.integer_range("indices", [(3, 4)]) == (0, 3)
    # Label 0 is CTC's blank and the padding of sequence APIs: guessed labels leave it out.
    assert probing.integer_range("labels", [(3, 4)]) == (1, 3)
    assert probing.integer_range("mask", [(3, 4)]) == (0, 2)
    assert probing.integer_range("lengths", [(5, 4)]) == (1, 5)


# -- what TensorFlow says ------------------------------------------------------

_PAIR = Guess(shapes=((3, 4), (3, 4)), kinds=("float", "float"), positive=(False, False))


def test_learns_the_rank_from_tensorflows_message() -> None:
    learned = learn_from_error("Expected input 0 to have rank 3 but got: 2 [Op:Einsum]", _PAIR)
    assert learned[0].shapes == ((2, 3, 4), (2, 3, 4))
    assert ((2, 3, 4), (2, 4, 5)) in [g.shapes for g in learned]
    four = learn_from_error("convolution input must be 4-dimensional: [3,4]", _PAIR)
    assert four[0].shapes == ((2, 3, 4, 5), (2, 3, 4, 5))


def test_learns_matmul_chains_and_broadcasts() -> None:
    chained = learn_from_error("Matrix size-incompatible: In[0]: [3,4], In[1]: [3,4] [Op:MatMul]", _PAIR)
    assert chained[0].shapes == ((3, 4), (4, 5))
    triple = Guess(shapes=((3, 4), (4, 5), (5, 6)), kinds=("float",) * 3, positive=(False,) * 3)
    broadcast = learn_from_error("Incompatible shapes: [3,5] vs. [5,6] [Op:AddV2]", triple)
    assert broadcast[0].shapes == ((3, 4), (4, 5), (5,))


def test_learns_complex_one_parameter_at_a_time_and_positive_after_a_domain_error() -> None:
    complex_ = learn_from_error(
        "Value for attr 'Tcomplex' of double is not in the list of allowed values: complex64", _PAIR
    )
    assert [g.kinds for g in complex_] == [("complex", "float"), ("float", "complex"), ("complex", "complex")]
    # tf.signal.irfft's own check names the dtype as tf.complex64.
    irfft = learn_from_error("IRFFT requires tf.complex64 or tf.complex128 inputs, got: tf.Tensor()", _PAIR)
    assert [g.kinds for g in irfft] == [g.kinds for g in complex_]
    domain = learn_from_error("Condition x > 0 did not hold element-wise", _PAIR)
    assert domain == [_PAIR.with_positive()]


def test_probing_is_bounded() -> None:
    calls = []

    def forward(guess: Guess) -> Attempt:
        calls.append(guess)
        return Attempt(guess, error=ValueError(f"shape {len(calls)} is wrong, try rank 3 or Incompatible shapes"))

    search = Search(("x", "y"), hints_for(None, ("x", "y")))
    assert search.run(forward) is None
    assert len(calls) == probing.MAX_ATTEMPTS
    assert len(set(calls)) == len(calls)  # never the same guess twice


# -- the fixtures, through the command line ------------------------------------


@pytest.fixture(scope="module")
def signatures_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("probing")
    (folder / "gradcheck.toml").write_text("", encoding="utf-8")
    shutil.copy(SIGNATURES, folder / "signatures.py")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        return by_name(run_json("signatures.py", "--shape-only"))


def _shapes(result: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    return {i["name"]: (tuple(i["shape"]), i["dtype"]) for i in result["inputs"]}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("attention_scores", {"queries": ((3, 4, 5), "float64"), "keys": ((3, 2, 5), "float64")}),
        ("batched_matmul", {"x": ((2, 3, 4), "float64"), "y": ((2, 4, 5), "float64")}),
        ("conv_images", {"images": ((2, 3, 3, 4), "float64"), "kernel": ((2, 3, 4, 5), "float64")}),
        ("affine", {"x": ((3, 4), "float64"), "w": ((4, 5), "float64"), "b": ((5,), "float64")}),
        ("sparse_xent", {"logits": ((3, 4), "float64"), "labels": ((3,), "int32")}),
        ("gather_rows", {"params": ((3, 4), "float64"), "indices": ((3,), "int32")}),
        ("masked_sum", {"x": ((3, 4), "float64"), "mask": ((3, 4), "int32")}),
        ("normal_log_density", {"x": ((3, 4), "float64"), "scale": ((3, 4), "float64")}),
        ("log_det", {"matrix": ((4, 4), "float64")}),
        ("sqrt_sum", {"x": ((3, 4), "float64")}),
        ("pinned_float32", {"x": ((3, 4), "float32")}),
        # A guessed complex input is checked as its real and imaginary parts (see the guessed complex tests).
        (
            "spectrum_energy",
            {"signal.real": ((3, 4), "float64"), "signal.imag": ((3, 4), "float64"), "gain": ((3, 4), "float64")},
        ),
    ],
)
def test_probing_finds_working_inputs(signatures_report: dict[str, Any], name: str, expected: dict) -> None:
    result = signatures_report[name]
    assert result["status"] == "passed", result
    assert _shapes(result) == expected
    assert all(i.get("guessed") for i in result["inputs"])


def test_the_report_says_where_the_inputs_came_from(signatures_report: dict[str, Any]) -> None:
    def note(name: str) -> str:
        return next(n for n in signatures_report[name]["notes"] if "guessed shapes" in n)

    assert "(from the docstring)" in note("attention_scores")
    assert "after TensorFlow's" in note("batched_matmul")
    assert "labels=(3,) int32 in [1, 3)" in note("sparse_xent")
    assert "scale drawn positive, as its name says" in note("normal_log_density")
    assert "positive draws: normal draws gave NaN or Inf" in note("sqrt_sum")
    assert "positive draws" in note("log_det")


def test_gives_up_with_a_skip_that_suggests_no_untried_shape(signatures_report: dict[str, Any]) -> None:
    result = signatures_report["fixed_reshape"]
    assert result["status"] == "skipped"
    reason = result["skip_reason"]
    assert "no guessed shapes worked" in reason and "tried" in reason
    assert "requested shape has 77" in reason  # TensorFlow's own words, to size the input by
    assert "inputs = { x = [...] }" in reason  # no shape probing did not see work


def test_list_shows_the_guessed_inputs(project: Path) -> None:
    shutil.copy(SIGNATURES, project / "signatures.py")
    result = invoke("list", "signatures.py::affine", "signatures.py::sparse_xent", "signatures.py::fixed_reshape")
    assert result.exit_code == 0, result.output
    assert "b: (5,) float64 guessed" in result.output
    assert "labels: (3,) int32 integer guessed" in result.output
    assert "x: not configured; no guessed shapes worked" in result.output


def test_init_writes_integer_complex_and_float32_guesses_that_run(project: Path) -> None:
    (project / "gradcheck.toml").unlink()
    shutil.copy(SIGNATURES, project / "signatures.py")
    targets = [f"signatures.py::{n}" for n in ("sparse_xent", "pinned_float32", "spectrum_energy")]
    assert invoke("init", *targets).exit_code == 0
    text = (project / "gradcheck.toml").read_text()
    assert 'labels = { shape = [3], dtype = "int32", distribution = "integer", low = 1, high = 3 }' in text
    assert 'dtype = "float32"  # guessed' in text
    assert 'signal = { shape = [3, 4], dtype = "complex128" }' in text
    report = run_json(*targets, "--shape-only")
    assert [r["status"] for r in report["results"]] == ["passed"] * 3
    assert not any("guessed shapes" in n for r in report["results"] for n in r.get("notes", []))


NAN_ALWAYS = """
    import numpy as np
    import tensorflow as tf


    @tf.custom_gradient
    def always_nan(x):
        def grad(dy):
            return dy
        return x * np.nan, grad
"""


def test_a_skip_suggests_only_shapes_the_forward_pass_ran_on(project: Path) -> None:
    write(project, "nan.py", NAN_ALWAYS)
    result = run_json("nan.py")["results"][0]
    assert result["status"] == "skipped"
    reason = result["skip_reason"]
    assert "inputs = { x = { shape = [3, 4], low = ..., high = ... } }" in reason


def test_documented_lists_of_tensors_are_read_from_the_docstring() -> None:
    f = _function(
        'def f(initial_state, params, x, names):\n    """Doc.\n\n    Args:\n'
        "      initial_state: A sequence of Tensors with common batch shape.\n"
        "      params: A list of zero-dimensional Tensors.\n"
        "      x: A Tensor of shape [3]; a list of them is not accepted.\n"
        "      names: A list of strings. Tensors are named after them.\n"
        '    """\n'
    )
    hints = hints_for(f, ("initial_state", "params", "x", "names"))
    assert hints["initial_state"].sequence and hints["params"].sequence
    assert not hints["x"].sequence and not hints["names"].sequence


def test_a_skip_asks_for_a_documented_list_of_tensors_as_items(project: Path) -> None:
    write(
        project,
        "loops.py",
        """
        import tensorflow as tf


        def pair_loop(initial_state, scale):
            \"\"\"Scale both tensors of the state.

            Args:
              initial_state: A sequence of two Tensors of the same shape.
              scale: A Tensor.
            \"\"\"
            @tf.custom_gradient
            def inner(a, b):
                return (a * 2.0, b * 2.0), lambda da, db: (2.0 * da, 2.0 * db)

            if not isinstance(initial_state, (list, tuple)):
                shapes = f"{initial_state.shape} and {tf.shape(scale).numpy()}"
                raise TypeError(f"initial_state is a list of tensors to scale by scale, not shapes {shapes}")
            first, second = initial_state
            return inner(first, second * scale)
        """,
    )
    reason = run_json("loops.py")["results"][0]["skip_reason"]
    assert "inputs = { initial_state = { items = [[...], [...]] }, scale = [...] }" in reason, reason
    write(project, "gradcheck.toml", "[functions.pair_loop]\ninputs = { initial_state = { items = [[3], [3]] } }\n")
    assert run_json("loops.py")["results"][0]["status"] == "passed"


def test_the_api_probes_as_the_command_line_does(signatures_report: dict[str, Any]) -> None:
    module = load_copy(SIGNATURES)
    for name in ("attention_scores", "sparse_xent", "log_det"):
        result = gradcheck.check(getattr(module, name), shape_only=True)
        assert result.status == "passed", result
        shapes = {i.name: (tuple(i.shape), i.dtype) for i in result.inputs}
        assert shapes == _shapes(signatures_report[name])


# -- guessed complex inputs, compared under TensorFlow's conjugate convention ----

_COMPLEX_PARTS = {("native", "signal.real"), ("numeric", "signal.real"), ("native", "signal.imag")}
#: name -> the (check, input) pairs blamed in fast and full mode, with no config at all
COMPLEX_VERDICTS: dict[str, set[tuple[str, str | None]]] = {
    "spectrum": set(),
    "spectrum_unconjugated": _COMPLEX_PARTS | {("numeric", "signal.imag")},
    "spectral_energy": set(),
    "spectral_energy_conjugated": {("native", "signal.imag"), ("numeric", "signal.imag")},
    "spectral_energy_summed": {("shape", "signal")},
}
#: What --shape-only still sees: the gradient's shape, not its values.
COMPLEX_SHAPE_ONLY = {"spectral_energy_summed": {("shape", "signal")}}


@pytest.fixture(scope="module")
def spectra_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict[str, Any]]]:
    folder = tmp_path_factory.mktemp("spectra")
    (folder / "gradcheck.toml").write_text("", encoding="utf-8")
    shutil.copy(SPECTRA, folder / "spectra.py")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        return {
            mode: by_name(run_json("spectra.py", *flags))
            for mode, flags in {"fast": (), "full": ("--mode", "full"), "shape-only": ("--shape-only",)}.items()
        }


@pytest.mark.parametrize("mode", ["fast", "full", "shape-only"])
def test_a_guessed_complex_input_is_checked_with_no_config(spectra_reports: dict[str, Any], mode: str) -> None:
    expected = (
        COMPLEX_VERDICTS if mode != "shape-only" else {n: COMPLEX_SHAPE_ONLY.get(n, set()) for n in COMPLEX_VERDICTS}
    )
    got = {name: blamed(result) for name, result in spectra_reports[mode].items()}
    assert got == expected
    for name, result in spectra_reports[mode].items():
        assert result["status"] == ("failed" if expected[name] else "passed"), result["problems"]
        assert result["inputs"] == [
            {"name": "signal.real", "shape": [3, 4], "dtype": "float64", "guessed": True},
            {"name": "signal.imag", "shape": [3, 4], "dtype": "float64", "guessed": True},
        ]
        assert any("signal=(3, 4) complex (a complex dtype" in note for note in result["notes"])


@pytest.mark.parametrize("name", ["spectrum_unconjugated", "spectral_energy_conjugated"])
def test_a_guessed_complex_input_gets_the_conjugate_hint(spectra_reports: dict[str, Any], name: str) -> None:
    hints = [p["hint"] or "" for p in spectra_reports["fast"][name]["problems"]]
    assert hints and all("tf.math.conj" in hint for hint in hints)


@pytest.mark.parametrize("shape_only", [False, True])
def test_the_api_checks_a_guessed_complex_input_as_the_command_line_does(
    spectra_reports: dict[str, Any], shape_only: bool
) -> None:
    module = load_copy(SPECTRA)
    report = spectra_reports["shape-only" if shape_only else "fast"]
    for name in COMPLEX_VERDICTS:
        result = gradcheck.check(getattr(module, name), shape_only=shape_only)
        assert result.status == report[name]["status"], result
        assert {(p.check, p.input) for p in result.problems} == blamed(report[name])
        assert [(i.name, i.dtype, i.guessed) for i in result.inputs] == [
            ("signal.real", "float64", True),
            ("signal.imag", "float64", True),
        ]


def test_the_api_checks_a_guessed_complex64_input_in_float32() -> None:
    module = load_copy(SPECTRA)
    assert gradcheck.check(module.spectrum, dtype="float32").status == "passed"
    wrong = gradcheck.check(module.spectral_energy_conjugated, dtype="float32")
    assert {(p.check, p.input) for p in wrong.problems} == COMPLEX_VERDICTS["spectral_energy_conjugated"]
    assert {i.dtype for i in wrong.inputs} == {"float32"}


def test_list_and_init_show_a_guessed_complex_input_whole(project: Path) -> None:
    shutil.copy(SPECTRA, project / "spectra.py")
    listed = invoke("list", "spectra.py::spectral_energy_conjugated")
    assert listed.exit_code == 0, listed.output
    assert "signal: (3, 4) complex128 guessed" in listed.output
    assert "signal.real" not in listed.output
    (project / "gradcheck.toml").unlink()
    assert invoke("init", "spectra.py").exit_code == 0
    text = (project / "gradcheck.toml").read_text()
    assert text.count('inputs = { signal = { shape = [3, 4], dtype = "complex128" } }  # guessed') == 5
    configured = by_name(run_json("spectra.py"))
    assert {name: blamed(result) for name, result in configured.items()} == COMPLEX_VERDICTS
    assert not any("guessed shapes" in n for r in configured.values() for n in r.get("notes", []))
    assert "signal: (3, 4) complex128" in invoke("list", "spectra.py::spectrum").output


def test_a_complex_input_left_out_gets_the_none_hint_for_the_argument(project: Path) -> None:
    write(
        project,
        "left_out.py",
        """
        import tensorflow as tf


        @tf.custom_gradient
        def spectrum_power(signal):
            power = tf.reduce_sum(tf.abs(tf.signal.fft(signal)) ** 2)

            def grad(dy):
                return None

            return power, grad
        """,
    )
    result = run_json("left_out.py")["results"][0]
    assert blamed(result) == {(c, p) for c in ("native", "numeric") for p in ("signal.real", "signal.imag")}
    hints = {p["hint"] for p in result["problems"]}
    assert len(hints) == 1
    (hint,) = hints
    assert "returned None for signal:" in hint and "constants = { signal = ... }" in hint


PYTHON_VALUED = """
    import tensorflow as tf


    @tf.custom_gradient
    def rounded(x, mode):
        y = tf.floor(x) if mode == "floor" else tf.round(x)
        def grad(dy):
            return dy, None
        return y, grad


    @tf.custom_gradient
    def quantized(x, bits):
        if bits == 32:
            return tf.identity(x), lambda dy: (dy, None)
        scale = 2.0 ** bits
        return tf.round(x * scale) / scale, lambda dy: (dy, None)


    @tf.custom_gradient
    def applied(x, fn):
        def grad(dy):
            return dy, None
        return fn(x), grad


    @tf.custom_gradient
    def scaled(x, alpha: float):
        def grad(dy):
            return dy * alpha, dy * x
        return x * alpha, grad
"""


def test_a_python_valued_argument_no_drawn_tensor_fits_is_a_skip_with_the_constants_line(project: Path) -> None:
    # A tensor drawn for a mode string, a bit width or a function makes every forward call raise: that is
    # no bug of the code, and the config line to write is a constant.
    write(project, "python_valued.py", PYTHON_VALUED)
    results = by_name(run_json("python_valued.py"))
    for name, argument, placeholder in [
        ("rounded", "mode", "..."),
        ("quantized", "bits", "..."),
        ("applied", "fn", '{ import = "your_module:fn" }'),
    ]:
        result = results[name]
        assert result["status"] == "skipped", result
        assert f"argument {argument} is a Python " in result["skip_reason"]
        assert f"[functions.{name}] constants = {{ {argument} = {placeholder} }}" in result["skip_reason"]
    # A Python-annotated argument a drawn tensor fits is checked as a tensor, gradient and all.
    assert results["scaled"]["status"] == "passed"


def test_init_writes_the_constants_of_a_python_valued_argument(project: Path) -> None:
    (project / "gradcheck.toml").unlink()
    write(project, "python_valued.py", PYTHON_VALUED)
    assert invoke("init", "python_valued.py::rounded").exit_code == 0
    text = (project / "gradcheck.toml").read_text()
    assert "constants = { mode = ... }" in text, text


def test_with_the_constant_given_a_python_valued_argument_is_checked(project: Path) -> None:
    write(project, "python_valued.py", PYTHON_VALUED)
    table = "[functions.quantized]\ninputs = { x = [3, 4] }\nconstants = { bits = 32 }\n"
    (project / "gradcheck.toml").write_text(table, encoding="utf-8")
    # Inside tf.function, tf.custom_gradient makes the constant a tensor, and `if bits == 32` raises there.
    result = run_json("python_valued.py::quantized")["results"][0]
    assert result["status"] == "failed"
    assert {(p["check"], p["execution"]) for p in result["problems"]} == {("execution", "function")}
    assert 'execution = "eager"' in result["problems"][0]["hint"]
    (project / "gradcheck.toml").write_text(table + 'execution = "eager"\n', encoding="utf-8")
    assert run_json("python_valued.py::quantized")["results"][0]["status"] == "passed"
