"""Diagnoses: what is wrong with a job, as a flag with the numbers that prove it.

Each diagnosis is one rule over measured figures with its threshold here, in one place (docs/
recommendations.md explains each one):

- ``busy_but_unproductive``: utilization ≥ 80 % while SM-active < 40 %, or tensor-active < 5 % on a
  training job, or MFU < 10 % (MFU from logged tokens/s with 6·N FLOPs per token);
- ``input_bound``: a training job whose utilization keeps swinging between bursts (> 70 %) and dips
  (< 10 %): dips ≥ 10 % of samples, bursts ≥ 30 %, and ≥ 10 % of consecutive sample pairs swing;
- ``poor_scaling``: one run family (model, GPU model, precision, per-GPU batch, sequence length) measured
  at several GPU counts, whose per-GPU throughput at this count is < 80 % of that at the smallest count;
- ``throttling``: ≥ 10 % of samples carry a power or thermal throttle bit, or sit at ≥ 85 °C;
- ``idle_gpus``: half or more of the job's GPUs sat at or under the idle threshold over the whole view
  (each GPU's time-weighted mean utilization, job_signals ``unused_gpus``), so the job's chart, one line per
  GPU, and its diagnosis say the same;
- ``oversized_gpu``: a cheaper catalog GPU holds the job's peak memory under the safety fraction and would
  run the same work at most 80 % busy, so the same work costs less per unit.
"""

from __future__ import annotations

import datetime as dt
import functools

import duckdb
import polars as pl

from analytics.filters import Filters, horizon
from analytics.job_signals import view_jobs_sql, view_signals, with_active
from analytics.query import frame
from analytics.shared import active, ledger_prices, memo, shared
from analytics.unit_costs import ASSUMED_PRECISION
from gpuledger.ledger.prices import PriceBook
from gpuledger.ledger.reference import GpuModel, catalog
from gpuledger.ledger.settings import Settings
from gpuledger.ledger.thresholds import DEFAULT, DIAGNOSIS_KEYS

# each rule's threshold by name (gpuledger/ledger/thresholds.py: one frozen object, their meanings)
THRESHOLDS: dict[str, float] = {k: getattr(DEFAULT, k) for k in DIAGNOSIS_KEYS}
TRAINING_KINDS = ("training", "fine-tune")
DIAGNOSIS_COLUMNS = {
    "job_id": "",
    "name": "",
    "user_name": "",
    "team": "",
    "diagnosis": "busy_but_unproductive | input_bound | poor_scaling | throttling | idle_gpus | oversized_gpu",
    "statistic": "name of the figure the rule tests",
    "value": "its value",
    "threshold": "the rule's threshold",
    "evidence": "one sentence with the numbers",
}


@functools.cache
def _models() -> dict[str, GpuModel]:
    return {m.model: m for m in catalog()}


def peak_tflops(model: str | None, precision: str | None) -> float | None:
    """The catalog's dense peak TFLOP/s of ``model`` for ``precision``; no precision logged: the one MFU
    assumes (analytics/unit_costs.py ASSUMED_PRECISION, bf16)."""
    entry = _models().get(model or "")
    if entry is None:
        return None
    prec = (precision or ASSUMED_PRECISION).lower()
    peaks = {
        "bf16": entry.bf16_tflops,
        "fp16": entry.fp16_tflops,
        "fp32": entry.fp32_tflops,
        "tf32": entry.tf32_tflops,
        "fp8": entry.fp8_tflops,
    }
    return peaks.get(prec, entry.fp16_tflops)


def _runs(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Every training run with its job's GPUs; read once per sharing block (analytics/shared.py): the
    Recommendations page asked for it five times (right-sizing and scaling, for recommendations and
    diagnoses)."""
    runs = memo(
        con,
        "training_runs",
        lambda: frame(
            con,
            """SELECT r.job_id, r.model, r.params, r.precision, r.batch_size, r.seq_len, r.tokens_per_s,
                      r.samples_per_s, r.peak_mem_mib, j.gpu_model, j.gpu_count, j.kind
               FROM training_runs r JOIN jobs j USING (job_id)""",
        ),
    )
    return runs.clone()


def mfu(runs: pl.DataFrame) -> pl.DataFrame:
    """job_id, mfu_pct = tokens/s × 6·N ÷ (GPUs × dense peak for the precision) × 100, where all are known.

    The attention term is left out, so this is a slight under-estimate (docs/metrics.md has the full MFU).
    """
    rows = []
    for r in runs.filter(pl.col("tokens_per_s").is_not_null() & pl.col("params").is_not_null()).to_dicts():
        peak = peak_tflops(r["gpu_model"], r["precision"])
        if peak and r["gpu_count"]:
            rows.append(
                {
                    "job_id": r["job_id"],
                    "mfu_pct": r["tokens_per_s"] * 6 * r["params"] / (r["gpu_count"] * peak * 1e12) * 100,
                }
            )
    return pl.DataFrame(rows, schema={"job_id": pl.Utf8, "mfu_pct": pl.Float64})


SCALING_COLUMNS = {
    "family": "model | GPU model | precision | per-GPU batch | seq len | unit",
    "unit": "tokens or samples",
    "gpu_count": "",
    "runs": "runs measured at this count",
    "tput_per_gpu": "mean per-GPU throughput (unit/s)",
    "efficiency": "tput_per_gpu ÷ tput_per_gpu at the smallest count",
    "usd_per_munit": "$ per 1M units at the on-demand list price of the GPU model",
    "best_gpu_count": "the count with the highest per-GPU throughput (lowest $ per unit)",
    "best_tput_per_gpu": "",
}


@shared  # per ledger: the sizing rule asks once per view (the items scan: once a week), the diagnoses again
def scaling_table(con: duckdb.DuckDBPyConnection, *, as_of: dt.datetime | None = None) -> pl.DataFrame:
    """Per run family measured at ≥ 2 GPU counts: throughput per GPU, efficiency, $ per unit (SCALING_COLUMNS)."""
    runs = _runs(con).with_columns(
        pl.when(pl.col("tokens_per_s").is_not_null())
        .then(pl.lit("tokens"))
        .otherwise(pl.lit("samples"))
        .alias("unit"),
        (pl.coalesce("tokens_per_s", "samples_per_s") / pl.col("gpu_count")).alias("tpg"),
    )
    runs = runs.filter(
        pl.col("tpg").is_not_null() & (pl.col("gpu_count") > 0) & pl.col("model").is_not_null()
    )
    if runs.is_empty():
        return pl.DataFrame(
            schema={**dict.fromkeys(SCALING_COLUMNS, pl.Float64), "family": pl.Utf8, "unit": pl.Utf8}
        )
    runs = runs.with_columns(
        pl.concat_str(
            [
                pl.col("model"),
                pl.col("gpu_model"),
                pl.col("precision"),
                pl.col("batch_size").cast(pl.Utf8),
                pl.col("seq_len").cast(pl.Utf8),
                pl.col("unit"),
            ],
            separator="|",
            ignore_nulls=True,
        ).alias("family")
    )
    per = runs.group_by("family", "unit", "gpu_model", "gpu_count").agg(
        pl.len().alias("runs"), pl.col("tpg").mean().alias("tput_per_gpu")
    )
    multi = (
        per.group_by("family")
        .agg(pl.col("gpu_count").n_unique().alias("counts"))
        .filter(pl.col("counts") >= 2)
    )
    per = per.join(multi.select("family"), on="family").sort("family", "gpu_count")
    prices, day = ledger_prices(con), (as_of or dt.datetime(9999, 1, 1)).date()
    per = per.with_columns(
        (pl.col("tput_per_gpu") / pl.col("tput_per_gpu").first().over("family", order_by="gpu_count")).alias(
            "efficiency"
        ),
        pl.col("gpu_model")
        .map_elements(lambda m: prices.offered(m, "on_demand", None, day), return_dtype=pl.Float64)
        .alias("price"),
    )
    best = (
        per.sort("tput_per_gpu", descending=True)
        .group_by("family")
        .agg(
            pl.col("gpu_count").first().alias("best_gpu_count"),
            pl.col("tput_per_gpu").first().alias("best_tput_per_gpu"),
        )
    )
    return (
        per.join(best, on="family")
        .with_columns((pl.col("price") / (pl.col("tput_per_gpu") * 3600.0) * 1e6).alias("usd_per_munit"))
        .select(list(SCALING_COLUMNS))
        .sort("family", "gpu_count")
    )


RIGHT_SIZE_COLUMNS = {
    "job_id": "",
    "gpu_model": "current model",
    "rate_usd_per_gpu_hour": "the job's own cost ÷ GPU-hours in the view",
    "peak_mem_mib": "max of sampled peak and the run's logged peak",
    "needed_tflops": "busy share × the current GPU's dense peak (TFLOP/s)",
    "basis": "SM-active | utilization (an upper bound); both outside idle stretches",
    "candidate": "cheapest catalog model that fits",
    "candidate_mem_mib": "",
    "candidate_tflops": "its dense peak for the job's precision",
    "candidate_usd_per_gpu_hour": "list price at the job's tier (on_demand when the tier has none)",
    "busy_pct": "SM-active (else utilization) on the current GPU outside idle stretches (active_*_pct)",
    "busy_pct_there": "the same work's busy share on the candidate: busy_pct × peak ÷ candidate peak",
    "gpu_hours": "",
    "cost_usd": "",
}


def right_size(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters | None = None,
    settings: Settings | None = None,
    as_of: dt.datetime | None = None,
    signals: pl.DataFrame | None = None,
    view: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Jobs a cheaper catalog GPU would run at an equal or lower $ per unit of work (RIGHT_SIZE_COLUMNS).

    ``signals`` / ``view``: this view's job_signals / view_jobs_sql rows, when the caller has them.

    The job's busy share is its SM-active (else its utilization, an upper bound on the FLOPs it needs) on
    the current GPU outside its idle stretches (job_signals.with_active: idle time is reclaim_idle's, and a
    GPU must be sized for the work it does when it works). A candidate must: be from the same vendor and a
    data-centre part (RTX cards are left out: their licences and form factors rarely allow the swap); for
    a multi-GPU job, have the same GPU-to-GPU interconnect as the current model (catalog ``interconnect``:
    an NVLink/NVSwitch job moved to PCIe cards would spend its time in all-reduce, which no FLOP count
    shows); hold the job's peak memory within the safety fraction; run the same work at most 80 % busy
    (busy share × current dense peak ÷ candidate dense peak for the job's precision), so the work takes no
    longer; and cost at least 10 % less per GPU-hour. The cheapest such candidate wins. Left out: jobs at
    or under the idle threshold (reclaim_idle's), at or over 80 % utilization (a GPU kept busy may be
    bound by latency, not FLOPs) and jobs holding unused GPUs (fewer_gpus first: their mean understates
    what the used GPUs need).
    """
    filters = filters or Filters()
    settings = settings or Settings()
    as_of = as_of or horizon(con)
    sig = with_active(
        signals
        if signals is not None
        else view_signals(con, filters=filters, settings=settings, as_of=as_of)[1]
    )
    if view is None:
        vj, params = view_jobs_sql(filters, as_of)
        view = frame(con, vj, params)
    view = view.select("job_id", "kind", "gpu_model", "gpu_count", "pricing_tier", "gpu_hours", "cost_usd")
    runs = _runs(con).select(
        "job_id", "params", "precision", "tokens_per_s", pl.col("peak_mem_mib").alias("run_peak")
    )
    jobs = (
        view.join(
            sig.select(
                "job_id",
                pl.col("active_util_pct").alias("mean_util_pct"),
                pl.col("active_sm_pct").alias("sm_active_pct"),
                "peak_mem_mib",
                "n_samples",
                "unused_gpus",
                "idle_s",
            ),
            on="job_id",
            how="left",
        )
        .join(runs, on="job_id", how="left")
        .filter(pl.col("cost_usd").is_not_null() & (pl.col("gpu_hours") > 0))
    )
    models = _models()
    util = pl.col("mean_util_pct")
    # the per-job rules below, as one filter first: most jobs of a fleet fail one of them
    jobs = jobs.filter(
        pl.col("gpu_model").is_in(list(models))
        & (pl.col("peak_mem_mib").is_not_null() | pl.col("run_peak").is_not_null())
        & (util.is_null() | ((util > settings.idle_util_pct) & (util < THRESHOLDS["busy_util_pct"])))
        & (pl.col("unused_gpus").fill_null(0) == 0)
        & (pl.col("sm_active_pct").is_not_null() | util.is_not_null())
    )
    prices, day = ledger_prices(con), (as_of or dt.datetime(9999, 1, 1)).date()
    schema = {c: pl.Float64 for c in RIGHT_SIZE_COLUMNS} | {
        c: pl.Utf8 for c in ("job_id", "gpu_model", "basis", "candidate")
    }
    # The rules of one job as columns (each job against the candidates of its model, precision, tier and
    # GPU count, cheapest first; the first that qualifies wins): a loop over the jobs' dicts was 0.2 s for
    # 33 k jobs on a 50 M-sample ledger.
    jobs = jobs.with_columns(
        pl.max_horizontal("peak_mem_mib", "run_peak").alias("peak_mem"),
        pl.coalesce("sm_active_pct", "mean_util_pct").cast(pl.Float64).alias("busy_pct"),
        (
            pl.when(pl.col("sm_active_pct").is_not_null())
            .then(pl.lit("SM-active"))
            .otherwise(pl.lit("utilization (an upper bound)"))
            + pl.when(pl.col("idle_s").fill_null(0) != 0)
            .then(pl.lit(" outside idle stretches"))
            .otherwise(pl.lit(""))
        ).alias("basis"),
        (pl.col("cost_usd") / pl.col("gpu_hours")).alias("rate"),
        (pl.col("gpu_count").fill_null(1) > 1).alias("multi"),
    ).filter(pl.col("busy_pct").is_not_null())
    keys = jobs.select("gpu_model", "precision", "pricing_tier", "multi").unique().rows()
    cand_rows = [
        (
            model,
            precision,
            tier,
            multi,
            peak_tflops(model, precision),
            rank,
            c.model,
            float(c.memory_mib),
            price,
            c_peak,
        )
        for model, precision, tier, multi in keys
        for rank, (c, price, c_peak) in enumerate(
            _candidates(models[model], precision, tier, multi, prices, day)
        )
    ]
    cands = pl.DataFrame(
        cand_rows,
        schema={
            "gpu_model": jobs.schema["gpu_model"],
            "precision": jobs.schema["precision"],
            "pricing_tier": jobs.schema["pricing_tier"],
            "multi": pl.Boolean,
            "peak": pl.Float64,
            "rank": pl.Int64,
            "candidate": pl.Utf8,
            "candidate_mem_mib": pl.Float64,
            "candidate_usd_per_gpu_hour": pl.Float64,
            "candidate_tflops": pl.Float64,
        },
        orient="row",
    )
    busy_there = pl.col("busy_pct") * pl.col("peak") / pl.col("candidate_tflops")
    best = (
        jobs.with_row_index("_order")
        .join(cands, on=["gpu_model", "precision", "pricing_tier", "multi"], nulls_equal=True)
        .filter(
            pl.col("peak").is_not_null()
            & (pl.col("peak") != 0)
            & (
                pl.col("candidate_usd_per_gpu_hour")
                <= pl.col("rate") * (1.0 - THRESHOLDS["oversized_min_saving"])
            )
            & (pl.col("candidate_mem_mib") * settings.batch_safety_fraction >= pl.col("peak_mem"))
            & (busy_there <= THRESHOLDS["oversized_max_busy_pct"])
        )
        .sort("_order", "rank")
        .unique("_order", keep="first", maintain_order=True)
    )
    return best.select(
        "job_id",
        "gpu_model",
        pl.col("rate").alias("rate_usd_per_gpu_hour"),
        pl.col("peak_mem").cast(pl.Float64).alias("peak_mem_mib"),
        (pl.col("peak") * pl.col("busy_pct") / 100.0).alias("needed_tflops"),
        "basis",
        "candidate",
        "candidate_mem_mib",
        "candidate_tflops",
        "candidate_usd_per_gpu_hour",
        "busy_pct",
        busy_there.alias("busy_pct_there"),
        "gpu_hours",
        "cost_usd",
    ).cast(schema)


@shared  # one computation per view inside a read-only batch: a page's recommendations and diagnoses both ask
def view_right_size(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters | None = None,
    settings: Settings | None = None,
    as_of: dt.datetime | None = None,
) -> pl.DataFrame:
    """:func:`right_size` over the view's own signals and jobs (its defaults), shared: the Recommendations
    page computed it twice (the recommendations, then the diagnoses), ~40 ms each on the 28-day demo."""
    return right_size(con, filters=filters, settings=settings, as_of=as_of)


def _candidates(
    cur: GpuModel,
    precision: str | None,
    tier: str,
    multi_gpu: bool,
    prices: PriceBook,
    day: dt.date,
) -> list[tuple[GpuModel, float, float]]:
    """(model, $/GPU-hour at ``tier`` else on_demand, dense peak) of the catalog models a job on ``cur`` may
    move to, cheapest first (catalog order among equal prices): same vendor, not RTX, not ``cur``, with a
    price and a peak for the precision; for a multi-GPU job, the same interconnect (NVLink work needs
    NVLink: an all-reduce over PCIe shows in no FLOP count)."""
    out = []
    for cand in catalog():
        if cand.model == cur.model or cand.vendor != cur.vendor or cand.model.startswith("RTX-"):
            continue
        if multi_gpu and cand.interconnect != cur.interconnect:
            continue
        cand_peak = peak_tflops(cand.model, precision)
        price = prices.rate(cand.model, tier, None, day)
        if cand_peak and price is not None:
            out.append((cand, price, cand_peak))
    return sorted(out, key=lambda c: c[1])


def diagnoses(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters | None = None,
    settings: Settings | None = None,
    as_of: dt.datetime | None = None,
    signals: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Every flag raised on the jobs of the view, one row per (job, diagnosis) (DIAGNOSIS_COLUMNS)."""
    filters = filters or Filters()
    settings = settings or Settings()
    as_of = as_of or horizon(con)
    sig = (
        signals
        if signals is not None
        else view_signals(con, filters=filters, settings=settings, as_of=as_of)[1]
    )
    vj, params = view_jobs_sql(filters, as_of)
    view = frame(con, vj, params).select(
        "job_id", "name", "user_name", "team", "kind", "gpu_model", "gpu_count"
    )
    runs = _runs(con)
    jobs = view.join(sig, on="job_id", how="left").join(mfu(runs), on="job_id", how="left")
    t = THRESHOLDS
    flags: list[dict[str, object]] = []

    def flag(
        j: dict[str, object], diagnosis: str, statistic: str, value: float, threshold: float, evidence: str
    ) -> None:
        flags.append(
            {
                "job_id": j["job_id"],
                "name": j["name"],
                "user_name": j["user_name"],
                "team": j["team"],
                "diagnosis": diagnosis,
                "statistic": statistic,
                "value": float(value),
                "threshold": float(threshold),
                "evidence": evidence,
            }
        )

    # The per-job rules, as columns (each threshold is tested here once); only the jobs one of them flags
    # become dicts for their evidence (to_dicts costs per cell: 39 k jobs of 35 columns on a 50 M-sample
    # ledger, 0.5 s).
    training = pl.col("kind").is_in(list(TRAINING_KINDS))
    busy = pl.col("mean_util_pct") >= t["busy_util_pct"]
    rules = jobs.with_columns(
        # busy but unproductive: the first of SM-active, tensor-active (training), MFU that is low
        pl.when(busy & (pl.col("sm_active_pct") < t["busy_sm_active_pct"]))
        .then(pl.lit("sm_active_pct"))
        .when(busy & (pl.col("tensor_active_pct") < t["busy_tensor_active_pct"]) & training)
        .then(pl.lit("tensor_active_pct"))
        .when(busy & (pl.col("mfu_pct") < t["busy_mfu_pct"]))
        .then(pl.lit("mfu_pct"))
        .alias("_busy"),
        (
            training
            & (pl.col("n_samples").fill_null(0) >= t["input_min_samples"])
            & (pl.col("dip_share").fill_null(0) >= t["input_dip_share"])
            & (pl.col("burst_share").fill_null(0) >= t["input_burst_share"])
            & (pl.col("swing_rate").fill_null(0) >= t["input_swing_rate"])
        )
        .fill_null(False)
        .alias("_input"),
        (
            (pl.col("throttled_share").fill_null(0) >= t["throttle_share"])
            | (pl.col("hot_share").fill_null(0) >= t["throttle_share"])
        ).alias("_throttle"),
        # the GPUs the job held (its record's count, or more when telemetry saw more), half or more idle
        pl.max_horizontal(pl.col("gpu_count").fill_null(0), pl.col("gpus_seen").fill_null(0)).alias("_gpus"),
    ).with_columns(
        (
            (pl.col("unused_gpus").fill_null(0) >= 1)
            & (pl.col("unused_gpus").fill_null(0) >= t["idle_gpus_share"] * pl.col("_gpus"))
        ).alias("_idle_gpus")
    )
    flagged = rules.filter(
        pl.col("_busy").is_not_null() | pl.col("_input") | pl.col("_throttle") | pl.col("_idle_gpus")
    )
    for j in flagged.to_dicts():
        who = _who(j)
        util, sm, tensor, mfu_pct = (
            j["mean_util_pct"],
            j["sm_active_pct"],
            j["tensor_active_pct"],
            j["mfu_pct"],
        )
        if j["_busy"] == "sm_active_pct":
            flag(
                j,
                "busy_but_unproductive",
                "sm_active_pct",
                sm,
                t["busy_sm_active_pct"],
                f"{who} shows {util:.0f} % utilization but only {sm:.0f} % SM-active"
                + (f" and {tensor:.0f} % tensor-active" if tensor is not None else "")
                + ": the GPU is busy with little work per cycle (small kernels, launch or sync overhead).",
            )
        elif j["_busy"] == "tensor_active_pct":
            flag(
                j,
                "busy_but_unproductive",
                "tensor_active_pct",
                tensor,
                t["busy_tensor_active_pct"],
                f"{who} shows {util:.0f} % utilization but {tensor:.1f} % tensor-active: the tensor cores are "
                "unused (fp32 math, or no autocast).",
            )
        elif j["_busy"] == "mfu_pct":
            flag(
                j,
                "busy_but_unproductive",
                "mfu_pct",
                mfu_pct,
                t["busy_mfu_pct"],
                f"{who} shows {util:.0f} % utilization at {mfu_pct:.1f} % MFU: busy, but far from the "
                "card's peak.",
            )
        if j["_input"]:
            flag(
                j,
                "input_bound",
                "swing_rate",
                j["swing_rate"],
                t["input_swing_rate"],
                f"{who} swings between bursts and near-zero dips: {j['dip_share'] * 100:.0f} % of samples under "
                f"10 %, {j['burst_share'] * 100:.0f} % over 70 %, {j['swing_rate'] * 100:.0f} % of consecutive samples "
                "swing; the data pipeline is starving the GPU (more loader workers, prefetch, faster storage).",
            )
        if j["_idle_gpus"]:
            n, idle = int(j["_gpus"]), int(j["unused_gpus"])
            flag(
                j,
                "idle_gpus",
                "idle_gpu_share",
                idle / n,
                t["idle_gpus_share"],
                (
                    f"{who} held {n} GPU(s) and {idle} of them stayed idle (mean utilization at or under the "
                    "idle threshold over the view): ask for fewer GPUs, or check that the job uses them all "
                    "(device count, DDP world size)."
                    if idle < n
                    else f"{who} held {n} GPU(s) and none did work (mean utilization at or under the idle "
                    "threshold over the view): release them when nothing runs."
                ),
            )
        if j["_throttle"]:
            thr, hot = j["throttled_share"] or 0, j["hot_share"] or 0
            stat, value = (
                ("throttled_share", j["throttled_share"]) if thr >= hot else ("hot_share", j["hot_share"])
            )
            temp = f", max {j['max_temp_c']:.0f} °C" if j["max_temp_c"] is not None else ""
            flag(
                j,
                "throttling",
                stat,
                value,
                t["throttle_share"],
                f"{who}: {thr * 100:.0f} % of samples power/thermal throttled, {hot * 100:.0f} % at "
                f"≥ 85 °C{temp}; check cooling and power caps on its host.",
            )
    scaling = scaling_table(con, as_of=as_of)
    if not scaling.is_empty():
        in_view = (
            runs.join(view.select("job_id", "name", "user_name", "team"), on="job_id")
            .with_columns(
                pl.concat_str(
                    [
                        pl.col("model"),
                        pl.col("gpu_model"),
                        pl.col("precision"),
                        pl.col("batch_size").cast(pl.Utf8),
                        pl.col("seq_len").cast(pl.Utf8),
                        pl.when(pl.col("tokens_per_s").is_not_null())
                        .then(pl.lit("tokens"))
                        .otherwise(pl.lit("samples")),
                    ],
                    separator="|",
                    ignore_nulls=True,
                ).alias("family")
            )
            .join(scaling, on=["family", "gpu_count"])
            .filter(pl.col("efficiency") < t["scaling_efficiency"])
        )
        for j in in_view.to_dicts():
            flag(
                j,
                "poor_scaling",
                "scaling_efficiency",
                j["efficiency"],
                t["scaling_efficiency"],
                f"{_who(j)} runs {j['model']} on {j['gpu_count']:g} GPUs at {j['efficiency'] * 100:.0f} % scaling "
                f"efficiency ({j['tput_per_gpu']:,.0f} {j['unit']}/s per GPU vs {j['best_tput_per_gpu']:,.0f} at "
                f"{j['best_gpu_count']:g} GPUs); {j['best_gpu_count']:g} GPUs give the lowest $ per {j['unit'][:-1]}.",
            )
    sized = (
        view_right_size(con, filters=filters, settings=settings, as_of=as_of)
        if signals is None and active(con)  # sig is the view's own: the shared result
        else right_size(con, filters=filters, settings=settings, as_of=as_of, signals=sig)
    )
    if not sized.is_empty():
        for j in sized.join(view.select("job_id", "name", "user_name", "team"), on="job_id").to_dicts():
            flag(
                j,
                "oversized_gpu",
                "peak_mem_mib",
                j["peak_mem_mib"],
                j["candidate_mem_mib"] * settings.batch_safety_fraction,
                f"{_who(j)} peaks at {j['peak_mem_mib'] / 1024:.1f} GiB at {j['busy_pct']:.0f} % {j['basis']} on "
                f"{j['gpu_model']} (${j['rate_usd_per_gpu_hour']:.2f}/GPU-h); {j['candidate']} "
                f"({j['candidate_mem_mib'] / 1024:.0f} GiB) would run it ~{j['busy_pct_there']:.0f} % busy at "
                f"${j['candidate_usd_per_gpu_hour']:.2f}/GPU-h.",
            )
    schema = {c: pl.Utf8 for c in DIAGNOSIS_COLUMNS} | {"value": pl.Float64, "threshold": pl.Float64}
    return pl.DataFrame(flags, schema=schema).sort("diagnosis", "job_id")


def _who(j: dict[str, object]) -> str:
    name = j.get("name")
    label = f"Job {j['job_id']}" + (f" ({name})" if name and name != j["job_id"] else "")
    return label
