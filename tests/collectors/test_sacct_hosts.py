"""Slurm host lists (collectors/sacct_hosts.py expand_nodelist) against Slurm's own reading, ``scontrol show
hostnames``, on generated lists; and the lists scontrol calls invalid refused with their line (issue 48:
``n[5-3]`` gave no host without a word, ``gpu[01-04`` became a host literally named ``gpu[01-04``).

scontrol expands a host list without a controller: it needs only a slurm.conf to read (two lines here)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess

import pytest

from collectors.ingest import ingest_file
from collectors.sacct_hosts import expand_nodelist
from gpuledger.ledger.errors import FormatError
from tests.collectors.test_sacct import ROWS, UTC, sacct_file

SCONTROL = shutil.which("scontrol")
needs_scontrol = pytest.mark.skipif(
    SCONTROL is None, reason="scontrol is not installed (apt install slurm-client)"
)


@pytest.fixture(scope="module")
def scontrol(tmp_path_factory: pytest.TempPathFactory):
    conf = tmp_path_factory.mktemp("slurm") / "slurm.conf"
    conf.write_text("ClusterName=hostlists\nSlurmctldHost=localhost\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}

    def hostnames(text: str) -> list[str] | None:
        """scontrol's hosts for ``text``; None where it says the list is invalid."""
        run = subprocess.run(
            [SCONTROL, "show", "hostnames", text], capture_output=True, text=True, env=env, timeout=30
        )
        if "Invalid hostlist" in run.stdout + run.stderr:
            return None
        assert run.returncode == 0, run.stderr
        return run.stdout.split()

    return hostnames


def _number(rng: random.Random) -> tuple[str, str]:
    """A range's bounds as Slurm writes them: zero-padded to one width, or not padded at all."""
    lo = rng.randrange(0, 120)
    hi = lo + rng.randrange(0, 12)
    width = rng.choice([0, 0, 2, 3, 4])
    return str(lo).zfill(width), str(hi).zfill(width)


def _group(rng: random.Random) -> str:
    items = []
    for _ in range(rng.randint(1, 3)):
        lo, hi = _number(rng)
        items.append(lo if rng.random() < 0.3 else f"{lo}-{hi}")
    return "[" + ",".join(items) + "]"


def _name(rng: random.Random) -> str:
    """One name: a plain host, or a prefix with one or two bracket groups (a product), ending in a group."""
    prefix = rng.choice(["gpu", "n", "node-", "rack", "c3cpu-a2-u", "dgx", "h100-"])
    if rng.random() < 0.25:
        return prefix + str(rng.randrange(0, 300))
    name = prefix + _group(rng)
    if rng.random() < 0.3:
        name += rng.choice(["-n", "x", "-ib", "s"]) + _group(rng)
    return name


def generated_lists(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [",".join(_name(rng) for _ in range(rng.randint(1, 3))) for _ in range(n)]


@needs_scontrol
def test_generated_host_lists_expand_as_scontrol_expands_them(scontrol):
    lists = generated_lists(seed=48, n=150)
    assert sum("[" in t for t in lists) > 100  # mostly bracketed lists, some products
    for text in lists:
        assert expand_nodelist(text) == scontrol(text), text


BAD = {
    "n[5-3]": "a reversed range [5-3]",
    "gpu[10-09]": "a reversed range [10-09]",
    "gpu[01-04": "a '[' that is never closed",
    "gpu[01-04,07": "a '[' that is never closed",
    "n[1-3]]": "a ']' with no '[' before it",
    "n]1[": "a ']' with no '[' before it",
    "n[[1-2]]": "a bracket inside a bracket",
    "n[]": "[] is not a number or a range of numbers",
    "n[a-b]": "[a-b] is not a number or a range of numbers",
    "n[-1]": "[-1] is not a number or a range of numbers",
    "n[1-2].ib": "'.ib' after the last bracket group",
    "a[1-2]b": "'b' after the last bracket group",
}


@needs_scontrol
@pytest.mark.parametrize("text", BAD)
def test_what_scontrol_cannot_read_is_refused_saying_why(scontrol, text):
    with pytest.raises(ValueError) as err:
        expand_nodelist(text)
    assert BAD[text] in str(err.value)
    # scontrol calls it invalid, or (an unclosed bracket, a ']' first) reads hosts no one named: 'gpu]'
    hosts = scontrol(text)
    assert hosts is None or any("]" in h or "[" in h for h in hosts), hosts


@pytest.mark.parametrize(
    ("nodes", "said"), [("n[5-3]", "a reversed range [5-3]"), ("gpu[01-04", "never closed")]
)
def test_a_bad_host_list_in_sacct_names_its_line(ledger, tmp_path, nodes, said):
    bad = ROWS[0].replace("|gpu[01-02]|", f"|{nodes}|").replace("100|", "300|", 1)
    assert f"|{nodes}|" in bad
    path = sacct_file(tmp_path, [ROWS[3], ROWS[4], bad])
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, path, opts=UTC)
    assert err.value.line == 4  # header, two good rows, then this one
    assert err.value.reason.startswith('column "NodeList": host list') and said in err.value.reason
    assert ledger.execute("SELECT count(*) FROM jobs").fetchall() == [(0,)]
