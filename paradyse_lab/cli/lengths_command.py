"""`paradyse-lab lengths DIR --tokenizer bytes|whitespace --out FILE`: measure real text, write a length file.

The written file (one length per line) is a workload: `file:FILE`. No download: it reads your files.
`paradyse-lab workload SPEC` prints a workload's band fractions next to the paper's Table 3.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tqdm import tqdm

from paradyse_lab.atomic_write import write_text_atomic
from paradyse_lab.cli.output import add_format_argument, print_json, print_table
from paradyse_lab.errors import UserInputError
from paradyse_lab.workloads import BAND_NAMES, DEFAULT_SIZE, PAPER_DATASETS, WORKLOAD_KINDS, get_workload

TOKENIZERS = {
    "bytes": lambda text: len(text.encode("utf-8")),
    "whitespace": lambda text: len(text.split()),
}


def register(sub) -> None:
    p = sub.add_parser("lengths", help="measure token lengths of the text files under a folder",
                       description="Count tokens of every text file under DIR (binary files are skipped) "
                       "and write one length per line: a workload usable as file:OUT.")
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--tokenizer", choices=sorted(TOKENIZERS), default="bytes",
                   help="bytes: UTF-8 bytes per file; whitespace: whitespace-separated words")
    p.add_argument("--out", required=True, help="length file to write")
    p.set_defaults(func=run_lengths)
    p = sub.add_parser("workload", help="show a workload's length distribution",
                       description=f"Sample a workload ({', '.join(WORKLOAD_KINDS)}) and print its "
                       "fraction of sequences per Table 3 band, beside the paper's for its datasets.")
    p.add_argument("spec")
    p.add_argument("--size", type=int, default=DEFAULT_SIZE, help=f"sequences to sample (default {DEFAULT_SIZE})")
    p.add_argument("--seed", type=int, default=0)
    add_format_argument(p)
    p.set_defaults(func=run_workload)


def run_lengths(args) -> int:
    root = Path(args.directory)
    if not root.is_dir():
        raise UserInputError(f"DIR {args.directory!r} is not a directory")
    count = TOKENIZERS[args.tokenizer]
    files = sorted(f for f in root.rglob("*") if f.is_file())
    lengths = []
    for f in tqdm(files, desc="measuring", unit="file", file=sys.stderr, disable=not sys.stderr.isatty()):
        data = f.read_bytes()
        if b"\0" in data[:4096]:
            continue
        n = count(data.decode("utf-8", errors="replace"))
        if n > 0:
            lengths.append(n)
    if not lengths:
        raise UserInputError(f"no non-empty text files under {args.directory!r}")
    out = Path(args.out)
    write_text_atomic(out, "".join(f"{n}\n" for n in lengths))
    print(f"wrote {len(lengths)} lengths ({args.tokenizer} tokens, max {max(lengths)}) to {out}")
    return 0


def run_workload(args) -> int:
    w = get_workload(args.spec, args.size, args.seed)
    fractions = w.band_fractions()
    paper = PAPER_DATASETS.get(args.spec)
    paper_frac = [v / sum(paper[0]) for v in paper[0]] if paper else None
    if args.format == "json":
        print_json({"workload": w.name, "sequences": len(w.lengths), "max_seq_len": max(w.lengths),
                    "total_tokens": sum(w.lengths), "band_fractions": dict(zip(BAND_NAMES, fractions)),
                    "paper_band_fractions": dict(zip(BAND_NAMES, paper_frac)) if paper_frac else None})
        return 0
    rows = [[name, f"{f:.1%}", f"{paper_frac[i]:.1%}" if paper_frac else "-"]
            for i, (name, f) in enumerate(zip(BAND_NAMES, fractions))]
    print(f"{w.name}: {len(w.lengths)} sequences, max {max(w.lengths)} tokens, {sum(w.lengths)} tokens in all")
    print_table(["band", "ours", "paper Table 3"], rows)
    return 0
