"""Learned cost models: scikit-learn conformance, AIC, the hybrid's boundary, persistence, the CostModel adapter."""

import warnings

import numpy as np
import pytest

from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.layer_graph import LayerGraph
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import USABLE, StrategyOption
from paradyse_lab.costmodel import AnalyticCostModel, uniform_plan_cost
from paradyse_lab.costmodel.factory import build_cost_model
from paradyse_lab.costmodel.learned_fit import fit_profile_file, fit_profiles
from paradyse_lab.costmodel.learned_model import LearnedCostModel
from paradyse_lab.costmodel.lowering import problem_from_cost_model
from paradyse_lab.costmodel.profiles import DATA_DIR, validate_profiles
from paradyse_lab.costmodel.synthetic import synthesize_profiles
from paradyse_lab.errors import UserInputError

A100 = get_cluster("a100-80gb-x8")
BUNDLED = DATA_DIR / "analytic_a100-80gb-x8.csv"


def small_estimator(kind: str, trees: int = 5):
    """A fresh, small regressor of each kind ("forest": the paper's forest, `make_regressor`; `trees`: the hybrid's
    and the residual's forest size). The regressors' module (scikit-learn: ~3 CPU s to import) is imported by the
    tests that use it, not while the file is collected: every pytest-xdist worker collects every test file."""
    from paradyse_lab.costmodel.regressors import (
        HybridRegressor,
        PolynomialRegressor,
        ResidualRegressor,
        make_regressor,
    )

    return {"hybrid": lambda: HybridRegressor(n_estimators=trees), "polynomial": PolynomialRegressor,
            "residual": lambda: ResidualRegressor(n_estimators=trees),
            "forest": lambda: make_regressor("forest")}[kind]()


def toy(seed=0, groups=3, n=30):
    """Rows of (group id, s) with y a different cubic per group, plus a bit of noise."""
    rng = np.random.default_rng(seed)
    X, y = [], []
    for g in range(groups):
        s = np.linspace(1, 100, n)
        X.append(np.column_stack([np.full(n, g), s]))
        y.append((g + 1) * (5 + 0.3 * s + 0.02 * s**2) * np.exp(rng.normal(0, 0.01, n)))
    return np.vstack(X), np.concatenate(y)


@pytest.fixture(scope="module")
def gpt_profile():
    df = synthesize_profiles(A100, ("gpt",), ratio=1.05, timestamp="2026-01-01T00:00:00+00:00")
    return validate_profiles(df.astype(str))


@pytest.fixture(scope="module")
def gpt_fit(gpt_profile):
    """`fit_profiles(kind, gpt_profile, A100, source_name="gpt.csv")`, each kind fitted once for the tests here
    (they read a fit and never change it)."""
    fits: dict = {}

    def fit(kind: str):
        if kind not in fits:
            fits[kind] = fit_profiles(kind, gpt_profile, A100, source_name="gpt.csv")
        return fits[kind]

    return fit


# ----- scikit-learn estimator API -----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["hybrid", "polynomial", "residual"])
def test_estimator_api(kind):
    from sklearn.base import clone
    from sklearn.exceptions import NotFittedError

    from paradyse_lab.costmodel.regressors import ResidualRegressor

    est = small_estimator(kind)
    X, y = toy()
    if isinstance(est, ResidualRegressor):
        X = np.column_stack([X, y * 0.9])  # a base prediction 10% low
    params = est.get_params()
    assert clone(est).get_params() == params
    with pytest.raises(NotFittedError):
        est.predict(X)
    assert est.fit(X, y) is est
    assert est.n_features_in_ == X.shape[1]
    assert est.score(X, y) > 0.95  # RegressorMixin: R^2
    with pytest.raises(ValueError):
        est.predict(X[:, :-1])  # wrong number of features
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError):
        est.fit(bad, y)
    est.set_params(**params)
    assert est.get_params() == params


@pytest.mark.parametrize("kind, expected", [
    ("hybrid", {}),
    ("residual", {}),
    ("polynomial", {"check_fit_idempotent": "predicts only for the groups it was fitted on; the check's "
                                            "random test rows form new groups"}),
])
def test_sklearn_check_estimator(kind, expected):
    import sklearn

    if tuple(int(x) for x in sklearn.__version__.split(".")[:2]) < (1, 6):
        pytest.skip("check_estimator(expected_failed_checks=...) needs scikit-learn >= 1.6")
    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # two trees: the checks are of the estimator API, which any forest size has
        check_estimator(small_estimator(kind, trees=2), expected_failed_checks=expected)


def test_make_regressor_kinds():
    from paradyse_lab.costmodel.regressors import make_regressor

    assert make_regressor("forest").get_params()["n_estimators"] == 50
    assert make_regressor("forest").get_params()["max_depth"] == 10
    assert make_regressor("forest").get_params()["random_state"] == 42
    hyb = make_regressor("hybrid").get_params()
    assert (hyb["n_estimators"], hyb["max_depth"], hyb["random_state"]) == (50, 10, 42)
    with pytest.raises(ValueError, match="valid: hybrid, forest, polynomial, residual"):
        make_regressor("xgboost")


def test_forest_predict_is_the_forests_own_prediction_to_the_bit():
    """`forest_predict` (what the cost models call, once per length) sums the trees as scikit-learn does: the same
    float64 values for rows inside and far outside the data, and the forest's own errors for bad rows."""
    from sklearn.ensemble import RandomForestRegressor

    from paradyse_lab.costmodel.regressors import forest_predict, make_regressor, predict

    rng = np.random.default_rng(0)
    X, y = rng.random((120, 5)) * [1, 10, 100, 1e3, 1e5], rng.random(120) * 7
    forest = make_regressor("forest").fit(X, y)
    for rows in (X[:3], rng.random((40, 5)) * 1e6, X[:1]):
        assert forest_predict(forest, rows).tobytes() == forest.predict(rows).tobytes()
        assert predict(forest, rows).tobytes() == forest.predict(rows).tobytes()
    with pytest.raises(ValueError, match="features"):
        forest_predict(forest, X[:2, :4])
    two = RandomForestRegressor(n_estimators=3, random_state=0).fit(X, np.column_stack([y, y]))
    assert forest_predict(two, X[:4]).shape == (4, 2)  # several outputs: the forest's own predict
    with_nan = X[:3].copy()
    with_nan[1, 2] = np.nan  # a missing value: the forest's own predict (its trees route it)
    assert forest_predict(forest, with_nan).tobytes() == forest.predict(with_nan).tobytes()
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        forest_predict(RandomForestRegressor(n_estimators=2), X[:2])


# ----- AIC ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("degree, coefs", [(1, [3.0, 2.0]), (2, [3.0, 2.0, -0.01]), (3, [3.0, 2.0, -0.05, 4e-4])])
def test_aic_recovers_the_true_degree(degree, coefs):
    from paradyse_lab.costmodel.regressors import fit_polynomial_aic

    # AIC never underfits a clear signal and overfits by one degree now and then (about 1 time in 6 per extra
    # coefficient): over 100 noisy draws the true degree must be the clear majority and never undershot.
    s = np.linspace(0, 100, 60)
    clean = np.polynomial.Polynomial(coefs)(s)
    chosen = []
    for seed in range(100):
        y = clean + np.random.default_rng(seed).normal(0, 0.5, s.size)
        got, poly = fit_polynomial_aic(s, y)
        chosen.append(got)
        assert np.max(np.abs(poly(s) - clean)) < 1.0
    counts = np.bincount(chosen, minlength=4)
    assert counts[:degree].sum() == 0
    assert counts[degree] >= 65 and counts.argmax() == degree


def test_polynomial_regressor_picks_a_degree_per_group():
    from paradyse_lab.costmodel.regressors import PolynomialRegressor

    s = np.linspace(1, 50, 40)
    X = np.vstack([np.column_stack([np.zeros_like(s), s]), np.column_stack([np.ones_like(s), s])])
    rng = np.random.default_rng(1)
    y = np.concatenate([2 + 3 * s, 1 + 0.5 * s**2]) + rng.normal(0, 0.05, 2 * s.size)
    est = PolynomialRegressor().fit(X, y)
    assert est.degrees_ == {(0.0,): 1, (1.0,): 2}
    with pytest.raises(ValueError, match="no profiled group"):
        est.predict(np.array([[2.0, 10.0]]))


# ----- the hybrid's switch ------------------------------------------------------------------------------------
def test_hybrid_switches_exactly_at_the_longest_profiled_length():
    from paradyse_lab.costmodel.regressors import HybridRegressor

    X, y = toy()
    est = HybridRegressor(n_estimators=10).fit(X, y)
    longest = X[:, 1].max()
    probe = np.array([[1, longest - 1], [1, longest], [1, longest + 1e-6], [1, 2 * longest]])
    assert est.inside(probe).tolist() == [True, True, False, False]
    pred = est.predict(probe)
    np.testing.assert_allclose(pred[:2], est.forest_.predict(probe[:2]))
    np.testing.assert_allclose(pred[2:], est.polynomial_.predict(probe[2:]))
    # The forest is flat beyond the data; the polynomial keeps the curve's growth.
    assert est.forest_.predict(probe[3:])[0] == pytest.approx(est.forest_.predict(probe[1:2])[0])
    assert pred[3] > 2 * pred[1]


def test_boundary_is_per_group():
    from paradyse_lab.costmodel.regressors import HybridRegressor

    X, y = toy(groups=2)
    keep = ~((X[:, 0] == 1) & (X[:, 1] > 50))  # group 1 profiled only up to 50
    est = HybridRegressor(n_estimators=5).fit(X[keep], y[keep])
    assert est.inside(np.array([[0, 80.0], [1, 80.0]])).tolist() == [True, False]


# ----- persistence --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["hybrid", "polynomial", "forest"])
def test_joblib_round_trip(tmp_path, kind):
    from paradyse_lab.costmodel.regressors import load, save

    est = small_estimator(kind)
    X, y = toy()
    est.fit(X, y)
    back = load(save(est, tmp_path / "m.joblib"))
    np.testing.assert_array_equal(back.predict(X), est.predict(X))
    assert back.get_params() == est.get_params()


def test_fitted_profile_round_trip_and_use_as_cost_model(tmp_path, gpt_fit):
    import joblib

    fitted = gpt_fit("hybrid")
    path = fitted.save(tmp_path / "hybrid.joblib")
    assert joblib.load(path).label == "hybrid (profile source=analytic)"
    a = LearnedCostModel(fitted, get_model("gpt"), A100)
    b = build_cost_model(str(path), get_model("gpt"), A100)
    opt = StrategyOption("metp")
    for s in (4096, 65536, 500_000):
        assert a.whole(opt, s) == b.whole(opt, s)
    with pytest.raises(UserInputError, match="not found"):
        build_cost_model(str(tmp_path / "missing.joblib"), get_model("gpt"), A100)


def test_cost_command_accepts_a_fitted_file(tmp_path, gpt_fit, capsys):
    """`paradyse-lab cost --cost-model FILE.joblib` prints the learned model's whole-model times (it crashed:
    the command called `check`, which only the analytic and paper models had)."""
    import json

    from paradyse_lab.cli import main

    fitted = gpt_fit("polynomial")
    path = fitted.save(tmp_path / "poly.joblib")
    code = main(["cost", "--model", "gpt", "--seq", "4K", "--strategies", "metp,megatron_ts",
                 "--cost-model", str(path), "--format", "json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    cm = LearnedCostModel(fitted, get_model("gpt"), A100)
    for name in ("metp", "megatron_ts"):
        assert out["strategies"][name]["total_time_s"] == pytest.approx(cm.whole(StrategyOption(name), 4096)[0])
    with pytest.raises(UserInputError, match="not profiled"):
        cm.check(StrategyOption("metp", recompute=True), 4096)


@pytest.mark.parametrize("module, message", [
    ("paradyse_lab.costmodel.learned", "written by an older version of paradyse-lab "
     r"\(module paradyse_lab.costmodel.learned no longer exists\); refit it with `paradyse-lab costmodel fit"),
    ("sklearn.no_such_module", "needs module sklearn.no_such_module, which is not installed"),
])
def test_a_file_naming_a_gone_module_says_refit(tmp_path, module, message):
    """A .joblib written before a module was renamed names the old module path: the error says so (it said
    the file was damaged)."""
    path = tmp_path / "old.joblib"
    path.write_bytes(f"c{module}\nFittedProfiles\n.".encode())  # a pickle of one class, by module path
    with pytest.raises(UserInputError, match=message):
        build_cost_model(str(path), get_model("gpt"), A100)


# ----- the CostModel adapter ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["hybrid", "forest", "polynomial"])
def test_paper_kinds_give_the_papers_additive_problem(gpt_profile, gpt_fit, kind):
    model = get_model("gpt")
    cm = LearnedCostModel(gpt_fit(kind), model, A100)
    problem = problem_from_cost_model(LayerGraph(model), cm, 32768, options=[StrategyOption(s) for s in USABLE])
    assert problem.fixed_bytes == 0 and problem.fixed_time_s == 0
    assert not problem.transient_bytes.any()
    for name in problem.options:
        t, m = cm.whole(StrategyOption(name), 32768)
        plan = [name] * model.layers
        assert problem.time_of(plan) == pytest.approx(t)
        scaled = m * cm.memory_scale(StrategyOption(name))  # in units of the option's own OOM threshold
        assert abs(problem.peak_bytes(plan) - scaled) <= 2 * model.layers  # integer division per sub-layer
    assert cm.budget_bytes(10**12) == cm.oom_threshold_bytes == gpt_profile["peak_bytes"].max()


def test_each_option_is_capped_at_its_own_profiled_peak(gpt_profile):
    """The paper's OOM threshold is per strategy: an option planned beyond the largest peak seen while
    profiling it does not fit, even where another option was seen to hold more memory."""
    model = get_model("gpt")
    short = gpt_profile[(gpt_profile["strategy"] != "megatron_cz") | (gpt_profile["seq_len"] <= 32768)]
    cm = LearnedCostModel(fit_profiles("polynomial", short), model, A100)
    cz, metp = StrategyOption("megatron_cz"), StrategyOption("metp")
    cz_cap = int(short[short["strategy"] == "megatron_cz"]["peak_bytes"].max())
    assert cm.strategy_thresholds[("megatron_cz", False)] == cz_cap < cm.oom_threshold_bytes
    seq = next(s for s in (36864, 40960, 49152, 65536) if cz_cap < cm.whole(cz, s)[1] < cm.oom_threshold_bytes)
    problem = problem_from_cost_model(LayerGraph(model), cm, seq, budget_bytes=cm.budget_bytes(10**12),
                                      options=[cz, metp])
    assert not problem.is_feasible(["megatron_cz"] * model.layers)  # past the memory megatron_cz was seen to run with
    assert problem.is_feasible(["metp"] * model.layers) == (cm.whole(metp, seq)[1] <= cm.oom_threshold_bytes)
    half = ["megatron_cz", "metp"] * (model.layers // 2)  # each layer charged its share of its option's threshold
    expected = sum(cm.whole(StrategyOption(n), seq)[1] / cm.strategy_thresholds[(n, False)] for n in half)
    assert problem.peak_bytes(half) == pytest.approx(expected / model.layers * cm.oom_threshold_bytes, rel=1e-6)


def test_residual_scales_the_analytic_structure(gpt_fit):
    model = get_model("gpt")
    cm = LearnedCostModel(gpt_fit("residual"), model, A100)
    analytic = AnalyticCostModel(model, A100)
    opt = StrategyOption("megatron_cz")
    t, m = cm.whole(opt, 65536)
    u = uniform_plan_cost(analytic, opt, 65536)
    assert t / u.total_time_s == pytest.approx(1, abs=0.05)  # synthetic rows: analytic x small noise
    learned_u = uniform_plan_cost(cm, opt, 65536)
    assert learned_u.total_time_s == pytest.approx(t, rel=1e-9)
    assert learned_u.peak_bytes == pytest.approx(m, rel=1e-6)
    assert learned_u.transient_bytes > 0  # the analytic structure is kept
    assert cm.budget_bytes(123) == 123


def test_unprofiled_options_and_models(gpt_fit):
    fitted = gpt_fit("polynomial")
    model = get_model("gpt")
    cm = LearnedCostModel(fitted, model, A100)
    problem = problem_from_cost_model(LayerGraph(model), cm, 8192, recompute=True)
    assert all(name.endswith("+recompute") for name in problem.dropped)
    assert "not profiled" in next(iter(problem.dropped.values()))
    with pytest.raises(UserInputError, match="no rows for model bert"):
        LearnedCostModel(fitted, get_model("bert"), A100)


def test_build_cost_model_names_and_bundled_profile():
    model = get_model("gpt")
    assert isinstance(build_cost_model("analytic", model, A100), AnalyticCostModel)
    cm = build_cost_model("polynomial", model, A100)
    assert cm.label == "polynomial (profile source=analytic)"
    assert fit_profile_file("polynomial", BUNDLED, A100) is cm.fitted  # cached per file
    names = "analytic, auto, calibrated, forest, hybrid, paper, polynomial, replay, residual"
    with pytest.raises(UserInputError, match=names):
        build_cost_model("oracle", model, A100)
