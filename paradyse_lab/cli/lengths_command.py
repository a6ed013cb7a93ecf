"""`paradyse-lab data lengths DIR --tokenizer bytes|whitespace|PATH --out FILE`: measure real text, write a length file.

The written file (one length per line) is a workload: `file:FILE`; with `--pack-tokens N` each line is one
packed step, its documents' lengths separated by spaces. No download: it reads your files.
Files are streamed in 1 MiB blocks (memory stays flat whatever their size). `--out` must lie outside DIR (an
output inside the tree being read would be counted, or would overwrite a document: refused), and the
temporary files an interrupted write of the toolkit leaves (`.NAME.XXXXXXXX.tmp`) are not documents, nor is
anything hidden: a file or folder whose name starts with a dot (`.git`, `.hg`, `.svn`, `.bzr`, `.gitignore`, an
editor's swap file) or a version-control folder without one (`CVS`, `_darcs`) is skipped, never descended into.
`paradyse-lab data workload SPEC` prints a workload's band fractions next to the
paper's Table 3, and with `--pack-tokens N` its packed steps (documents per step, tokens, the budget N left
unused, and the padding each step gets on `--p` GPUs: each document rounded up to the layout unit 2p, as the
cost model, the simulator and the runtime pad it).
"""

from __future__ import annotations

import codecs
import os
import sys
from pathlib import Path

from tqdm import tqdm

from paradyse_lab.cli.output import (
    add_format_argument,
    add_packing_arguments,
    add_sampling_argument,
    print_json,
    print_table,
)
from paradyse_lab.cluster.files import MAX_GPUS_FLAG, get_cluster
from paradyse_lab.cluster.presets import DEFAULT_CLUSTER
from paradyse_lab.core.strategies import layout_unit
from paradyse_lab.costmodel.packed import PackedStep
from paradyse_lab.errors import UserInputError, require_positive_int
from paradyse_lab.files.atomic_write import check_output_file, is_temporary_output, write_text_atomic
from paradyse_lab.options import integer
from paradyse_lab.workload import text_data
from paradyse_lab.workload.lengths import (
    BAND_NAMES,
    DEFAULT_SIZE,
    PAPER_DATASETS,
    WORKLOAD_KINDS,
    Workload,
    get_workload,
    pack_workload,
)
from paradyse_lab.workload.text_data import TEXT_FILE_SUFFIXES, load_tokenizer

SHOWN_STEPS = 5
"""Packed steps printed from each end of a workload (`--format json` lists them all)."""

BLOCK = 1 << 20
"""Bytes read at a time."""


def _count_bytes(blocks) -> int:
    """UTF-8 bytes of the text (invalid bytes count as the 3-byte replacement character, as decoding
    with errors='replace' would give)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    total = 0
    for block in blocks:
        total += len(decoder.decode(block).encode("utf-8"))
    return total + len(decoder.decode(b"", final=True).encode("utf-8"))


def _count_words(blocks) -> int:
    """Whitespace-separated words (str.split's rule), a word split across two blocks counted once."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    total, inside = 0, False
    for block in blocks:
        text = decoder.decode(block)
        if text:
            words = text.split()
            total += len(words) - (1 if words and inside and not text[0].isspace() else 0)
            inside = not text[-1].isspace()
    tail = decoder.decode(b"", final=True)  # a truncated character at the end: one replacement character
    return total + (1 if tail and not inside else 0)


TOKENIZERS = {"bytes": _count_bytes, "whitespace": _count_words}


def _counter(tokenizer: str):
    """The token counter of `--tokenizer`: a built-in one, or a tokenizers file's (the whole text encoded, no
    special tokens added, as `train --tokenizer` encodes a document)."""
    if tokenizer in TOKENIZERS:
        return TOKENIZERS[tokenizer]
    if not Path(tokenizer).exists():
        raise UserInputError(f"--tokenizer must be one of {', '.join(sorted(TOKENIZERS))} or a tokenizer.json (or "
                             f"its folder), got {tokenizer!r}")

    loaded = load_tokenizer(tokenizer)

    def count(blocks) -> int:
        text = b"".join(blocks).decode("utf-8", errors="replace")
        return len(loaded.encode(text, add_special_tokens=False).ids)

    return count


def _blocks(path: Path, first: bytes):
    """`first`, then the rest of the file in BLOCK-sized pieces."""
    yield first
    with open(path, "rb") as f:
        f.seek(len(first))
        yield from iter(lambda: f.read(BLOCK), b"")


UNDOTTED_VCS_FOLDERS = ("CVS", "_darcs")
"""Version-control folders whose names do not start with a dot (the dotted ones are hidden, so skipped too)."""


def _hidden(name: str) -> bool:
    return name.startswith(".") or name in UNDOTTED_VCS_FOLDERS


def document_files(root: Path) -> list[Path]:
    """The files under `root` that are documents (module docstring), in path order: hidden and version-control
    folders are pruned, not walked (a repository's `.git` holds its history as files, each would be counted)."""
    files, seen = [], set()
    for folder, subfolders, names in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:  # a linked folder met again (a link loop): walked once
            subfolders[:] = []
            continue
        seen.add(real)
        subfolders[:] = [d for d in subfolders if not _hidden(d)]
        files += [Path(folder) / n for n in names if not _hidden(n)]
    return sorted(f for f in files if f.is_file() and not is_temporary_output(f))


def register(sub) -> None:
    p = sub.add_parser("lengths", help="measure token lengths of the text files under a folder",
                       description="Count tokens of every document and write one length per line: a workload "
                       "usable as file:OUT. DIR a text dataset (a save_to_disk folder, a .jsonl/.parquet/.arrow "
                       "file or a folder of them): one document per row of --text-column, read and tokenized as "
                       "`train --tokenizer` reads it; otherwise every text file under DIR is one document "
                       "(binary files are skipped).")
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--tokenizer", default="bytes",
                   help="bytes: UTF-8 bytes per file; whitespace: whitespace-separated words; or a tokenizer.json "
                   "(or a folder holding one), the tokens `train --tokenizer` trains on")
    p.add_argument("--text-column", default="text", help="a text dataset's column holding the documents "
                   "(default text), as `train --text-column`")
    p.add_argument("--out", required=True, help="length file to write")
    add_packing_arguments(p)
    p.add_argument("--seed", type=integer, default=0, help="seed of --pack-order shuffled (default 0)")
    p.set_defaults(func=run_lengths)
    p = sub.add_parser("workload", help="show a workload's length distribution",
                       description=f"Sample a workload ({', '.join(WORKLOAD_KINDS)}) and print its "
                       "fraction of sequences per Table 3 band, beside the paper's for its datasets.")
    p.add_argument("spec")
    p.add_argument("--size", type=integer, default=DEFAULT_SIZE, help=f"sequences to sample (default {DEFAULT_SIZE})")
    p.add_argument("--seed", type=integer, default=0)
    add_sampling_argument(p)
    add_packing_arguments(p)
    p.add_argument("--gpus", "--p", dest="p", type=integer, default=None, metavar="N",
                   help="with --pack-tokens: GPUs a step is laid out on, for its padding to the layout unit 2p "
                   f"(default: the {DEFAULT_CLUSTER} node's)")
    add_format_argument(p)
    p.set_defaults(func=run_workload)


def is_text_dataset(path: Path) -> bool:
    """Whether `path` is what `train --tokenizer` reads as a dataset: a
    save_to_disk
    folder, a .jsonl / .parquet / .arrow file, or a folder holding such files."""
    if path.is_file():
        return path.suffix in TEXT_FILE_SUFFIXES
    if any((path / name).is_file() for name in ("state.json", "dataset_dict.json")):
        return True
    return any(f.is_file() and f.suffix in TEXT_FILE_SUFFIXES for f in path.iterdir())


def dataset_lengths(path: Path, tokenizer: str, column: str) -> list[int]:
    """Token counts of a text dataset's documents, read and tokenized as `train --tokenizer` reads them (one
    document per row of the text column; empty documents dropped)."""
    texts = text_data.read_texts(str(path), column, "DIR")
    if tokenizer in TOKENIZERS:
        lengths = [TOKENIZERS[tokenizer]([t.encode("utf-8")]) for t in texts]
        return [n for n in lengths if n > 0]
    if not Path(tokenizer).exists():
        _counter(tokenizer)  # the one-line error naming the choices
    return [len(ids) for ids in text_data.tokenize(texts, tokenizer)]


def run_lengths(args) -> int:
    root = Path(args.directory)
    if not root.exists():
        raise UserInputError(f"DIR {args.directory!r} is not a directory or a text dataset file")
    dataset = is_text_dataset(root)
    if not root.is_dir() and not dataset:
        raise UserInputError(f"DIR {args.directory!r} is not a directory (a file must be a .jsonl, .parquet or "
                             ".arrow text dataset)")
    count = None if dataset else _counter(args.tokenizer)
    if Path(args.out).resolve().is_relative_to(root.resolve()):  # checked before any folder is made
        raise UserInputError(f"--out {args.out!r} lies inside DIR {args.directory!r}, the tree being read (it would "
                             "be counted, or overwrite a document); write it outside DIR")
    out = check_output_file(args.out)
    lengths = dataset_lengths(root, args.tokenizer, args.text_column) if dataset else _file_lengths(root, count)
    if not lengths:
        raise UserInputError(f"no non-empty text files under {args.directory!r}")
    if args.pack_tokens is None:
        write_text_atomic(out, "".join(f"{n}\n" for n in lengths))
        print(f"wrote {len(lengths)} lengths ({args.tokenizer} tokens, max {max(lengths)}) to {out}")
        return 0
    packed = pack_workload(Workload(args.directory, tuple(lengths)), args.pack_tokens, args.pack_order, args.seed)
    write_text_atomic(out, "".join(" ".join(map(str, step)) + "\n" for step in packed.steps))
    print(f"wrote {len(lengths)} lengths ({args.tokenizer} tokens, max {max(lengths)}) in {len(packed.steps)} "
          f"steps of at most {args.pack_tokens} tokens ({args.pack_order}) to {out}")
    return 0


def _file_lengths(root: Path, count) -> list[int]:
    """Token counts of every text file under `root`, each file one document (binary and unreadable files
    skipped, empty ones dropped)."""
    files = document_files(root)
    lengths = []
    for f in tqdm(files, desc="measuring", unit="file", file=sys.stderr, disable=not sys.stderr.isatty()):
        try:
            with open(f, "rb") as handle:
                head = handle.read(4096)
        except OSError:
            continue  # unreadable (permissions, a dangling link): not text we can measure
        if b"\0" in head:
            continue
        n = count(_blocks(f, head))
        if n > 0:
            lengths.append(n)
    return lengths


def _step_rows(w: Workload, p: int) -> list[dict]:
    """Each packed step: its documents, tokens, the budget it leaves unused (the budget: the largest step's
    tokens when the steps came packed from a file) and its padding on p GPUs (each document up to the layout unit,
    `PackedStep.padding`)."""
    budget, unit = w.pack_tokens or max(sum(step) for step in w.steps), layout_unit(p)
    return [{"documents": list(step), "tokens": sum(step), "unused_budget": max(budget - sum(step), 0),
             "padding": PackedStep(tuple(step), unit).padding} for step in w.steps]


def run_workload(args) -> int:
    p = (require_positive_int("--gpus", args.p, MAX_GPUS_FLAG) if args.p is not None
         else get_cluster(DEFAULT_CLUSTER).gpus)
    w = get_workload(args.spec, args.size, args.seed, pack_tokens=args.pack_tokens, pack_order=args.pack_order,
                     sampling=args.sampling)
    fractions = w.band_fractions()
    paper = PAPER_DATASETS.get(args.spec)
    paper_frac = [v / sum(paper[0]) for v in paper[0]] if paper else None
    steps = _step_rows(w, p) if w.packs is not None else None
    if args.format == "json":
        out = {"workload": w.name, "sampling": args.sampling if paper else None, "sequences": len(w.lengths),
               "max_seq_len": max(w.lengths),
               "total_tokens": sum(w.lengths), "band_fractions": dict(zip(BAND_NAMES, fractions)),
               "paper_band_fractions": dict(zip(BAND_NAMES, paper_frac)) if paper_frac else None}
        if steps is not None:
            out.update({"pack_tokens": w.pack_tokens, "pack_order": args.pack_order if w.pack_tokens else None,
                        "p": p, "layout_unit": layout_unit(p), "steps": steps})
        print_json(out)
        return 0
    rows = [[name, f"{f:.1%}", f"{paper_frac[i]:.1%}" if paper_frac else "-"]
            for i, (name, f) in enumerate(zip(BAND_NAMES, fractions))]
    what = "documents" if steps is not None else "sequences"
    print(f"{w.name}: {len(w.lengths)} {what}, max {max(w.lengths)} tokens, {sum(w.lengths)} tokens in all")
    print_table(["band", "ours", "paper Table 3"], rows)
    if steps is not None:
        _print_steps(w, steps, p)
    return 0


def _abbreviate(lengths: list[int], width: int = 60) -> str:
    """The lengths separated by spaces, cut to about `width` characters."""
    text = " ".join(map(str, lengths))
    return text if len(text) <= width else text[:width].rsplit(" ", 1)[0] + f" ... ({len(lengths)})"


def _print_steps(w: Workload, steps: list[dict], p: int) -> None:
    budget = w.pack_tokens or max(s["tokens"] for s in steps)
    within = [s for s in steps if s["tokens"] <= budget]
    over = len(steps) - len(within)
    fill = sum(s["tokens"] for s in within) / (budget * len(within)) if within else 0.0
    print(f"\n{len(steps)} packed steps of at most {budget} tokens: {len(w.lengths) / len(steps):.2f} documents per "
          f"step on average; the steps within the budget fill {fill:.1%} of it (unused budget: the rest)"
          + (f"; {over} steps hold one document longer than the budget, alone" if over else "")
          + f"; on {p} GPUs each step is padded to a multiple of {layout_unit(p)} tokens, "
          f"{sum(s['padding'] for s in steps)} padding tokens in all")
    shown = list(enumerate(steps))
    if len(shown) > 2 * SHOWN_STEPS:
        shown = shown[:SHOWN_STEPS] + [(None, None)] + shown[-SHOWN_STEPS:]
    rows = [["...", "", "", "", "", ""] if s is None else
            [i, len(s["documents"]), s["tokens"], s["unused_budget"], s["padding"], _abbreviate(s["documents"])]
            for i, s in shown]
    print_table(["step", "documents", "tokens", "unused budget", f"padding (to {layout_unit(p)})", "lengths"], rows)
