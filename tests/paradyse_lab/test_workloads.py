import json

import numpy as np
import pytest

from paradyse_lab.cli import main
from paradyse_lab.errors import UserInputError
from paradyse_lab.workload.lengths import BAND_NAMES, PAPER_DATASETS, SAMPLINGS, get_workload, largest_remainder


@pytest.mark.parametrize("sampling", SAMPLINGS)
@pytest.mark.parametrize("name", ["github_code", "grch38"])
def test_paper_bands_match_table3_within_sampling_error(name, sampling):
    n = 4000
    w = get_workload(name, size=n, seed=1, sampling=sampling)
    percents, max_len = PAPER_DATASETS[name]
    expected = np.asarray(percents) / sum(percents)
    got = np.asarray(w.band_fractions())
    sigma = np.sqrt(expected * (1 - expected) / n)
    assert np.all(np.abs(got - expected) <= 4 * sigma + 1 / n), (got, expected)
    assert list(w.lengths) == sorted(w.lengths) and max(w.lengths) == max_len
    assert all(x % 512 == 0 and 512 <= x <= max_len for x in w.lengths)


@pytest.mark.parametrize("name", ["github_code", "grch38"])
@pytest.mark.parametrize("size", [100, 137, 200, 1000, 2049])
def test_stratified_sample_has_table3_band_shares_to_rounding(name, size, capsys):
    """`paradyse-lab data workload NAME --size N` (stratified by default): every band holds N x its Table 3 share
    rounded (within one sequence), and the dataset's maximum is in it."""
    assert main(["data", "workload", name, "--size", str(size), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    percents, max_len = PAPER_DATASETS[name]
    quotas = size * np.asarray(percents) / sum(percents)
    counts = size * np.asarray([data["band_fractions"][b] for b in BAND_NAMES])
    assert np.all(np.abs(counts - quotas) < 1), (counts, quotas)
    assert data["sampling"] == "stratified" and data["max_seq_len"] == max_len and data["sequences"] == size


def test_multinomial_sampling_is_the_noisy_alternative():
    """At 200 sequences multinomial draws put 3% of GitHubCode at 128K or longer (Table 3: 1.1%)."""
    w = get_workload("github_code", 200, seed=0, sampling="multinomial")
    assert w.band_fractions()[-1] == pytest.approx(0.03)
    assert get_workload("github_code", 200, seed=0).band_fractions()[-1] == pytest.approx(0.01)


def test_largest_remainder_counts():
    # quotas 131.4, 29, 19.6, 10.2, 5.4, 2.2, 2.2: the two seats left go to 19.6 and (a 0.4 tie) the earlier band
    assert largest_remainder([65.7, 14.5, 9.8, 5.1, 2.7, 1.1, 1.1], 200) == [132, 29, 20, 10, 5, 2, 2]
    assert largest_remainder([1, 1, 1], 4) == [2, 1, 1]
    assert sum(largest_remainder([3.5, 26.4, 28.7, 21.2, 11.9, 5.5, 1.9], 137)) == 137


def test_a_small_stratified_sample_keeps_the_maximum():
    w = get_workload("github_code", 10, seed=0)
    assert len(w.lengths) == 10 and w.lengths[-1] == 309 * 1024 and w.lengths[-2] < 128 * 1024


def test_bad_sampling_is_one_line_and_exit_2(capsys):
    assert main(["data", "workload", "github_code", "--sampling", "poisson"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--sampling" in err[0] and "stratified" in err[0]


def test_sampling_is_deterministic_for_a_seed():
    assert get_workload("grch38", 200, seed=3) == get_workload("grch38", 200, seed=3)
    assert get_workload("grch38", 200, seed=3) != get_workload("grch38", 200, seed=4)


def test_uniform_and_lognormal():
    w = get_workload("uniform:1024:8192", 300, seed=0)
    assert min(w.lengths) >= 1024 and max(w.lengths) <= 8192 and len(w.lengths) == 300
    assert all(n % 512 == 0 for n in w.lengths) and len(set(w.lengths)) == 15  # every multiple of 512 in range
    w = get_workload("lognormal:4096:0.5", 300, seed=0)
    assert 2048 < float(np.median(w.lengths)) < 8192 and all(n % 512 == 0 for n in w.lengths)
    w = get_workload("uniform", 300, seed=0)  # the defaults, 512:65536
    assert min(w.lengths) >= 512 and max(w.lengths) <= 65536 and all(n % 512 == 0 for n in w.lengths)
    assert all(n % 512 == 0 for n in get_workload("lognormal", 50).lengths)  # the defaults, 4096:1


@pytest.mark.parametrize("lo, hi", [(1000, 1500), (16, 64), (8, 16), (1, 3), (700, 700)])
def test_uniform_lengths_lie_inside_the_range_and_cover_it(lo, hi):
    """A range whose ends are not both multiples of 512 gives whole numbers of tokens, uniform in [LO, HI]."""
    w = get_workload(f"uniform:{lo}:{hi}", 400, seed=1)
    assert lo <= min(w.lengths) and max(w.lengths) <= hi
    assert len(set(w.lengths)) >= min(hi - lo + 1, 30)  # not one value every step
    assert abs(float(np.mean(w.lengths)) - (lo + hi) / 2) <= (hi - lo) / 8 + 0.5


def test_lognormal_of_a_median_off_the_granule_gives_whole_tokens_around_it():
    w = get_workload("lognormal:100:0.1", 400, seed=0)
    assert 95 <= float(np.median(w.lengths)) <= 105 and min(w.lengths) >= 60 and max(w.lengths) <= 160


@pytest.mark.parametrize("spec", ["uniform:8.5:16", "uniform:8:16.25", "uniform:16:8"])
def test_uniform_refuses_a_range_it_cannot_draw_from(spec):
    with pytest.raises(UserInputError, match="whole numbers of tokens with 1 <= LO <= HI"):
        get_workload(spec, 10)


def test_length_files(tmp_path):
    (tmp_path / "a.txt").write_text("4096\n\n512\n1024\n")
    assert get_workload(f"file:{tmp_path / 'a.txt'}").lengths == (512, 1024, 4096)
    assert get_workload(f"file:{tmp_path / 'a.txt'}", sort=False).lengths == (4096, 512, 1024)
    (tmp_path / "b.csv").write_text("id,n_tokens\n1,300\n2,700\n")
    assert get_workload(f"file:{tmp_path / 'b.csv'}").lengths == (300, 700)
    assert get_workload(f"file:{tmp_path / 'b.csv'}#id").lengths == (1, 2)
    (tmp_path / "c.jsonl").write_text(json.dumps([1, 2, 3]) + "\n" + json.dumps({"input_ids": [5] * 9}) + "\n")
    assert get_workload(f"file:{tmp_path / 'c.jsonl'}").lengths == (3, 9)


@pytest.mark.parametrize("content, name, match", [
    ("12\n-3\n", "x.txt", "x.txt line 2: length must be a positive integer"),
    ("12\n1.5\n", "x.txt", "line 2"),
    ("abc\n", "x.txt", "line 1"),
    ("", "x.txt", "holds no lengths"),
    ("a,b\n1,2\n", "x.csv", "no length column"),
    ("{not json\n", "x.jsonl", "line 1: not valid JSON"),
])
def test_bad_length_files(tmp_path, content, name, match):
    (tmp_path / name).write_text(content)
    with pytest.raises(UserInputError, match=match):
        get_workload(f"file:{tmp_path / name}")


def test_unknown_workload_lists_kinds():
    with pytest.raises(UserInputError, match="valid: github_code, grch38"):
        get_workload("wikipedia")
    with pytest.raises(UserInputError, match="does not exist"):
        get_workload("file:/no/such/file.txt")


def test_lengths_command_measures_text_files(tmp_path, capsys):
    d = tmp_path / "corpus"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("hello world foo")
    (d / "sub" / "b.md").write_text("é")
    (d / "bin.dat").write_bytes(b"\0\1\2")
    out = tmp_path / "lengths.txt"
    assert main(["data", "lengths", str(d), "--tokenizer", "bytes", "--out", str(out)]) == 0
    assert sorted(int(x) for x in out.read_text().split()) == [2, 15]
    assert main(["data", "lengths", str(d), "--tokenizer", "whitespace", "--out", str(out)]) == 0
    assert sorted(int(x) for x in out.read_text().split()) == [1, 3]
    capsys.readouterr()
    assert main(["data", "lengths", str(tmp_path / "none"), "--out", str(out)]) == 2
    assert "is not a directory" in capsys.readouterr().err


@pytest.mark.parametrize("inside", ["a.txt", "new.txt", "sub/../new.txt"])
def test_lengths_refuses_an_out_inside_the_tree_it_reads(tmp_path, capsys, inside):
    d = tmp_path / "corpus"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("hello world foo")
    (d / "b.txt").write_text("x" * 40)
    (tmp_path / "link").symlink_to(d)
    for out in (d / inside, tmp_path / "link" / inside):
        assert main(["data", "lengths", str(d), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "--out" in err and "inside DIR" in err
    assert (d / "a.txt").read_text() == "hello world foo" and not (d / "new.txt").exists()


def test_lengths_skips_the_temporary_files_of_its_own_writes(tmp_path, capsys):
    """A killed write leaves `.NAME.XXXXXXXX.tmp` (paradyse_lab.files.atomic_write): not a document."""
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "a.txt").write_text("hello world foo")
    (d / ".lengths.txt.k3j_9x0q.tmp").write_text("15\n")
    out = tmp_path / "lengths.txt"
    assert main(["data", "lengths", str(d), "--out", str(out)]) == 0
    assert out.read_text() == "15\n"
    capsys.readouterr()


def test_workload_command_json(capsys):
    assert main(["data", "workload", "grch38", "--size", "100", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sequences"] == 100 and data["max_seq_len"] == 624 * 1024
    assert abs(sum(data["band_fractions"].values()) - 1) < 1e-9


def test_lengths_streams_files(tmp_path, capsys):
    import tracemalloc

    d = tmp_path / "corpus"
    d.mkdir()
    words = b"lorem ipsum \xc3\xa9t\xc3\xa9 dolor\n" * (24 * 2**20 // 26)  # 24 MiB, multi-byte chars across blocks
    (d / "big.txt").write_bytes(words)
    out = tmp_path / "lengths.txt"
    tracemalloc.start()
    try:
        assert main(["data", "lengths", str(d), "--tokenizer", "bytes", "--out", str(out)]) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.read_text().split() == [str(len(words))]
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.0f} MiB for a 24 MiB file"
    assert main(["data", "lengths", str(d), "--tokenizer", "whitespace", "--out", str(out)]) == 0
    assert out.read_text().split() == [str(len(words.split()))]
    capsys.readouterr()


def test_packed_workloads_and_packed_length_files(tmp_path, capsys):
    from paradyse_lab.workload.packing import pack_documents

    plain = get_workload("github_code", 120, seed=2)
    packed = get_workload("github_code", 120, seed=2, pack_tokens=16384)
    assert packed.packs == tuple(pack_documents(plain.lengths, 16384)) and packed.pack_tokens == 16384
    assert sorted(packed.lengths) == sorted(plain.lengths) and plain.steps == tuple((n,) for n in plain.lengths)
    shuffled = get_workload("github_code", 120, seed=2, pack_tokens=16384, pack_order="shuffled")
    assert shuffled.packs == tuple(pack_documents(plain.lengths, 16384, "shuffled", 2)) != packed.packs
    # a length file of packed steps: one step per line, its order kept; repacking flattens it first
    d = tmp_path / "corpus"
    d.mkdir()
    for i, n in enumerate([300, 700, 200, 900, 50]):
        (d / f"{i}.txt").write_text("x" * n)
    out = tmp_path / "packed.txt"
    assert main(["data", "lengths", str(d), "--out", str(out), "--pack-tokens", "1000"]) == 0
    assert out.read_text() == "200\n700 300\n900 50\n"  # first-fit decreasing, steps shortest first
    w = get_workload(f"file:{out}")
    assert w.packs == tuple(tuple(int(x) for x in line.split()) for line in out.read_text().splitlines())
    assert get_workload(f"file:{out}", pack_tokens=2000).packs == ((200,), (900, 700, 300, 50))
    capsys.readouterr()
    assert main(["data", "workload", f"file:{out}", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # the budget a step leaves unused, and apart from it each document's padding to the layout unit 2p (default p: 8)
    assert data["steps"] == [{"documents": [200], "tokens": 200, "unused_budget": 800, "padding": 8},
                             {"documents": [700, 300], "tokens": 1000, "unused_budget": 0, "padding": 8},
                             {"documents": [900, 50], "tokens": 950, "unused_budget": 50, "padding": 12 + 14}]
    assert (data["p"], data["layout_unit"]) == (8, 16)
    assert main(["data", "workload", f"file:{out}", "--format", "json", "--p", "3"]) == 0
    assert [s["padding"] for s in json.loads(capsys.readouterr().out)["steps"]] == [4, 2, 4]  # to 6
    assert main(["data", "workload", "grch38", "--size", "50", "--pack-tokens", "65536", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["pack_tokens"] == 65536 and data["pack_order"] == "sorted"
    assert sum(len(s["documents"]) for s in data["steps"]) == data["sequences"] == 50
    assert all(s["unused_budget"] == max(65536 - s["tokens"], 0) for s in data["steps"])
    assert main(["data", "workload", "grch38", "--size", "50", "--pack-tokens", "65536"]) == 0
    text = capsys.readouterr().out
    assert "packed steps of at most 65536 tokens" in text
    assert "documents  tokens  unused budget  padding (to 16)  lengths" in text
