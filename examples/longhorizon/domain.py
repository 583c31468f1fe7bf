"""The long-horizon example's domain: towns with facts, task templates, and the generator of its
document corpus, data files and tasks (deterministic).

``python examples/longhorizon/domain.py`` regenerates ``corpus/*.md``, ``files/*.csv`` and
``tasks.jsonl`` from the fixed facts below; the committed files are its output.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOWNS = ("Arvel", "Brenn", "Cardo", "Dunmere", "Eskby", "Falloway", "Gask", "Hollin", "Istra", "Jorvik", "Kell", "Lune")
#: the statements a template needs: (attribute, where it is found: "search" the corpus or a "file")
TEMPLATES = {
    "density": ("What is the combined population density (residents per square kilometre) of {towns}? "
                "Round to 2 decimals.", (("population", "search"), ("area", "search")), "{population} / {area}"),
    "per_park": ("How many residents per park do {towns} have together, using the park counts in parks.csv? "
                 "Round to 2 decimals.", (("population", "search"), ("parks", "file")), "{population} / {parks}"),
    "budget": ("What is the combined yearly budget per resident (in crowns) of {towns}, with the budgets "
               "from budgets.csv? Round to 2 decimals.", (("budget", "file"), ("population", "search")),
               "{budget} / {population}"),
    "green": ("What is the number of parks per square kilometre of {towns} together, with the counts from "
              "parks.csv, divided by their combined budget in millions of crowns from budgets.csv? Round to 4 decimals.",
              (("parks", "file"), ("area", "search"), ("budget", "file")), "{parks} / {area} / ({budget} / 1000000)"),
}


def facts(rng: random.Random) -> dict[str, dict[str, int]]:
    return {t: {"population": rng.randrange(8_000, 90_000), "area": rng.randrange(6, 70),
                "founded": rng.randrange(1100, 1800), "parks": rng.randrange(3, 40),
                "budget": rng.randrange(20, 400) * 100_000} for t in TOWNS}


def document(town: str, f: dict[str, int], other: str, g: dict[str, int], rng: random.Random) -> str:
    old = f["population"] - rng.randrange(1_000, 6_000)
    return "\n".join([
        f"# {town}",
        "",
        f"{town} is a town on the northern coast, founded in {f['founded']}.",
        f"In the latest census {town} had {f['population']} residents.",
        f"The municipality of {town} covers {f['area']} square kilometres.",
        f"Twenty years earlier {town} had {old} inhabitants, before the new harbour opened.",
        f"Its neighbour {other} is often compared with it; {other} was founded in {g['founded']}.",
        f"Visitors come to {town} for its market, held every Thursday since {f['founded'] + rng.randrange(20, 200)}.",
        "",
    ])


def main() -> None:
    rng = random.Random(7)
    table = facts(rng)
    (HERE / "corpus").mkdir(exist_ok=True)
    (HERE / "files").mkdir(exist_ok=True)
    for i, town in enumerate(TOWNS):
        other = TOWNS[(i + 1) % len(TOWNS)]
        (HERE / "corpus" / f"{town.lower()}.md").write_text(document(town, table[town], other, table[other], rng))
    for name, column in (("parks.csv", "parks"), ("budgets.csv", "budget")):
        with open(HERE / "files" / name, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["town", column])
            writer.writerows([t, table[t][column]] for t in TOWNS)
    tasks = []
    for k, (kind, size) in enumerate([(kind, size) for size in (2, 3, 4, 5, 6) for kind in TEMPLATES]):
        question, needs, formula = TEMPLATES[kind]
        if len(needs) * size > 15:  # runs stay within about 40 steps
            continue
        towns = rng.sample(TOWNS, size)
        sums = {attr: sum(table[t][attr] for t in towns) for attr, _ in needs}
        digits = 4 if kind == "green" else 2
        expected = round(eval(formula.format(**sums)), digits)  # noqa: S307 - our own formula
        tasks.append({"id": f"lh-{k:02d}-{kind}-{size}", "task": question.format(towns=", ".join(towns[:-1]) + " and " + towns[-1]),
                      "type": "math", "expected": expected, "tolerance": 1e-9})
    (HERE / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))


if __name__ == "__main__":
    main()
