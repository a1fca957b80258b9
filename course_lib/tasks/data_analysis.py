"""Data analysis's task generator: seeded CSV tables, and questions whose answers pandas computes.

Five kinds of table (sales, weather, students, inventory, sensor logs), three instances of each (say
`sales_2022`, `sales_2023`, `sales_2024`), plus `products.csv`, a lookup table for joins. Training
questions use the first two instances of each kind and test questions the third, so that no test
answer can be learned from the training set. Each question stores the pandas code that answers it
(`solution_code`, which prints the answer) and the reference answer, computed at generation time by
running that very code. `python -m course_lib.tasks --only data_analysis` writes data/data_analysis/.
The environment (the sandboxed tool and the verifier) is `course_lib.envs.data_analysis`.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import random
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from course_lib.envs.data_analysis import CSV_DIR
from course_lib.tasks.files import write_jsonl

N_TRAIN, N_TEST = 240, 60
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]

# ----- the CSV files ------------------------------------------------------------------------------
#
# Written with the csv module from Python's `random` (not numpy), with every float formatted by
# hand, so that the same seed gives the same bytes on any machine.

# kind -> the instances used for training and the one held out for testing
INSTANCES = {
    "sales": (["sales_2022", "sales_2023"], "sales_2024"),
    "weather": (["weather_2022", "weather_2023"], "weather_2024"),
    "students": (["students_fall", "students_spring"], "students_summer"),
    "inventory": (["inventory_berlin", "inventory_lyon"], "inventory_porto"),
    "sensors": (["sensors_plant_a", "sensors_plant_b"], "sensors_plant_c"),
}

# product -> (category, supplier, base price)
PRODUCTS = {
    "Desk": ("Furniture", "Oakline", 189.0), "Chair": ("Furniture", "Oakline", 89.0),
    "Shelf": ("Furniture", "Brightwood", 59.0), "Lamp": ("Lighting", "Lumio", 34.0),
    "Bulb Pack": ("Lighting", "Lumio", 12.5), "Notebook": ("Stationery", "Papyra", 4.2),
    "Pen Set": ("Stationery", "Papyra", 7.9), "Stapler": ("Stationery", "Brightwood", 11.0),
    "Headphones": ("Electronics", "Sonex", 79.0), "Keyboard": ("Electronics", "Sonex", 45.0),
    "Mouse": ("Electronics", "Clickr", 19.0), "Webcam": ("Electronics", "Clickr", 55.0),
}

_FIRST = ["Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lena", "Milo",
          "Nia", "Omar", "Pia", "Quin", "Rosa", "Sami", "Tess", "Uma", "Vik", "Wren", "Yara", "Zane"]
_LAST = ["Abbott", "Brandt", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Haddad", "Ito", "Jansen",
         "Kowalski", "Lund", "Moreau", "Novak", "Okafor", "Petrov", "Rossi", "Silva", "Tanaka", "Varga"]


def _days(rng: random.Random, year: int, n: int) -> list[str]:
    start = pd.Timestamp(year=year, month=1, day=1)
    return sorted((start + pd.Timedelta(days=rng.randrange(365))).strftime("%Y-%m-%d") for _ in range(n))


def _sales(rng: random.Random, year: int) -> list[dict[str, Any]]:
    regions = ["North", "South", "East", "West", "Central"]
    weights = [rng.uniform(0.5, 2.0) for _ in regions]
    rows = []
    for day in _days(rng, year, rng.randint(150, 200)):
        product = rng.choice(list(PRODUCTS))
        price = PRODUCTS[product][2] * rng.uniform(0.85, 1.15)
        month = int(day[5:7])
        season = 1.6 if month in (11, 12) else 1.0  # a busy end of year, so that months differ
        rows.append({"date": day, "region": rng.choices(regions, weights)[0], "product": product,
                     "channel": rng.choice(["online", "store"]),
                     "units": max(1, round(rng.randint(1, 30) * season)), "unit_price": f"{price:.2f}"})
    return rows


def _weather(rng: random.Random, year: int) -> list[dict[str, Any]]:
    cities = {"Oslo": 6.0, "Lisbon": 17.5, "Vienna": 11.0}
    rows = []
    for week in range(0, 364, 7):
        day = pd.Timestamp(year=year, month=1, day=1) + pd.Timedelta(days=week + rng.randrange(7))
        for city, mean in cities.items():
            temp = mean - 9 * math.cos(2 * math.pi * (day.day_of_year - 15) / 365) + rng.gauss(0, 2.5)
            rain = max(0.0, rng.gauss(2.0, 4.0))
            humidity = min(100, max(25, round(55 + 4 * rain + rng.gauss(0, 8))))
            rows.append({"date": day.strftime("%Y-%m-%d"), "city": city, "temp_c": f"{temp:.1f}",
                         "rain_mm": f"{rain:.1f}", "humidity": humidity,
                         "wind_kmh": f"{abs(rng.gauss(14, 7)):.1f}"})
    return rows


def _students(rng: random.Random, term: str) -> list[dict[str, Any]]:
    names = rng.sample([f"{f} {last}" for f in _FIRST for last in _LAST], rng.randint(60, 110))
    rows = []
    for name in names:
        ability = rng.gauss(65, 12)  # shared by the three subjects, so that their scores correlate
        math_, reading, science = (min(100, max(0, round(ability + rng.gauss(0, spread))))
                                   for spread in (10, 12, 9))
        rows.append({"student": name, "class": rng.choice("ABCD"), "track": rng.choice(["science", "arts"]),
                     "math": math_, "reading": reading, "science": science,
                     "absences": max(0, round(rng.gauss(6 - (ability - 65) / 8, 3)))})
    return rows


def _inventory(rng: random.Random, site: str) -> list[dict[str, Any]]:
    categories = {"Tools": 24.0, "Garden": 15.0, "Kitchen": 9.0, "Toys": 12.0, "Office": 6.0}
    skus = rng.sample(range(1000, 9999), rng.randint(50, 90))
    rows = []
    for sku in skus:
        category = rng.choice(list(categories))
        rows.append({"sku": f"SKU-{sku}", "category": category,
                     "warehouse": rng.choice(["Dock A", "Dock B", "Annex"]),
                     "stock": rng.randint(0, 400), "reorder_level": rng.choice([10, 20, 25, 50, 75, 100]),
                     "unit_cost": f"{categories[category] * rng.uniform(0.4, 2.2):.2f}"})
    return rows


def _sensors(rng: random.Random, site: str) -> list[dict[str, Any]]:
    first_month = {"sensors_plant_a": 1, "sensors_plant_b": 4, "sensors_plant_c": 7}[site]
    start = pd.Timestamp(year=2024, month=first_month, day=1)
    offset = {f"S{i}": rng.uniform(-4, 6) for i in range(1, 6)}
    rows = []
    times = sorted(rng.randrange(91 * 24 * 60) for _ in range(rng.randint(150, 200)))
    for minutes in times:
        sensor = rng.choice(list(offset))
        temp = 60 + offset[sensor] + rng.gauss(0, 5)
        status = "fail" if temp > 72 else "warn" if temp > 66 else "ok"
        rows.append({"timestamp": (start + pd.Timedelta(minutes=minutes)).strftime("%Y-%m-%d %H:%M"),
                     "sensor": sensor, "temperature": f"{temp:.1f}", "pressure": f"{rng.gauss(1013, 6):.1f}",
                     "vibration": f"{abs(rng.gauss(0.3, 0.12)) + (temp - 60) / 200:.3f}", "status": status})
    return rows


_MAKERS: dict[str, Callable[[random.Random, Any], list[dict[str, Any]]]] = {
    "sales": lambda rng, name: _sales(rng, int(name[-4:])),
    "weather": lambda rng, name: _weather(rng, int(name[-4:])),
    "students": _students, "inventory": _inventory, "sensors": _sensors,
}


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def write_csvs(out_dir: Path, seed: int = 0) -> list[str]:
    """Write every CSV file into `out_dir`; returns their names in a fixed order."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = []
    for kind, (train_names, test_name) in INSTANCES.items():
        for name in [*train_names, test_name]:
            rng = random.Random(f"{seed}-{name}")  # one stream per file: changing one table leaves the others
            _write_csv(out_dir / f"{name}.csv", _MAKERS[kind](rng, name))
            names.append(f"{name}.csv")
    _write_csv(out_dir / "products.csv", [{"product": p, "category": c, "supplier": s}
                                          for p, (c, s, _) in PRODUCTS.items()])
    names.append("products.csv")
    return names


# ----- the questions ------------------------------------------------------------------------------
#
# A template gets the table (as pandas reads it), picks columns and values, and returns
# (question, code, answer type, decimals) or None when its draw would be ambiguous (a tie).
# The code is the solution after `df = pd.read_csv(...)`; it prints the answer.

# kind -> columns: "sum" (totals make sense), "mean" (averages only), "cat" (groups), "date", "entity"
SCHEMAS: dict[str, dict[str, Any]] = {
    "sales": {"sum": ["units"], "mean": ["unit_price"],
              "cat": ["region", "product", "channel"], "date": "date"},
    "weather": {"sum": ["rain_mm"], "mean": ["temp_c", "humidity", "wind_kmh"],
                "cat": ["city"], "date": "date"},
    "students": {"sum": [], "mean": ["math", "reading", "science", "absences"], "cat": ["class", "track"],
                 "entity": "student"},
    "inventory": {"sum": ["stock"], "mean": ["unit_cost", "reorder_level"], "cat": ["category", "warehouse"],
                  "entity": "sku"},
    "sensors": {"sum": [], "mean": ["temperature", "pressure", "vibration"], "cat": ["sensor", "status"],
                "date": "timestamp"},
}

Draft = tuple[str, str, str, int]


def _numeric(schema: dict[str, Any]) -> list[str]:
    return schema["sum"] + schema["mean"]


def _unique_best(series: pd.Series, largest: bool = True) -> bool:
    """True if the top (or bottom) value of `series` is clearly apart from the runner-up."""
    ordered = series.sort_values(ascending=not largest).to_list()
    return len(ordered) >= 2 and abs(ordered[0] - ordered[1]) > 1e-6 * max(1.0, abs(ordered[0]))


def _threshold(rng: random.Random, df: pd.DataFrame, col: str) -> str:
    value = float(df[col].quantile(rng.uniform(0.2, 0.8)))
    if pd.api.types.is_integer_dtype(df[col]):
        return str(round(value))
    return f"{value:.1f}" if df[col].abs().max() >= 10 else f"{value:.2f}"


def _t_mean_where(rng, f, df, s) -> Draft:
    cat, num = rng.choice(s["cat"]), rng.choice(_numeric(s))
    val = rng.choice(sorted(df[cat].unique()))
    return (f'In {f}, what is the average {num} of the rows where {cat} is "{val}"? Round to 2 decimals.',
            f'rows = df[df["{cat}"] == "{val}"]\nprint(round(float(rows["{num}"].mean()), 2))', "number", 2)


def _t_top_total(rng, f, df, s) -> Draft | None:
    if not s["sum"]:
        return None
    cat, num = rng.choice(s["cat"]), rng.choice(s["sum"])
    if not _unique_best(df.groupby(cat)[num].sum()):
        return None
    return (f"In {f}, which {cat} has the highest total {num}? Answer with the {cat} only.",
            f'totals = df.groupby("{cat}")["{num}"].sum()\nprint(totals.idxmax())', "string", 0)


def _t_lowest_mean(rng, f, df, s) -> Draft | None:
    cat, num = rng.choice(s["cat"]), rng.choice(_numeric(s))
    if not _unique_best(df.groupby(cat)[num].mean(), largest=False):
        return None
    return (f"In {f}, which {cat} has the lowest average {num}? Answer with the {cat} only.",
            f'means = df.groupby("{cat}")["{num}"].mean()\nprint(means.idxmin())', "string", 0)


def _t_count_greater(rng, f, df, s) -> Draft:
    num = rng.choice(_numeric(s))
    thr = _threshold(rng, df, num)
    return (f"How many rows of {f} have a {num} greater than {thr}?",
            f'print(int((df["{num}"] > {thr}).sum()))', "integer", 0)


def _t_count_and(rng, f, df, s) -> Draft:
    cat, num = rng.choice(s["cat"]), rng.choice(_numeric(s))
    val = rng.choice(sorted(df[cat].unique()))
    thr = _threshold(rng, df, num)
    return (f'How many rows of {f} have {cat} "{val}" and a {num} of at least {thr}?',
            f'print(int(((df["{cat}"] == "{val}") & (df["{num}"] >= {thr})).sum()))', "integer", 0)


def _t_correlation(rng, f, df, s) -> Draft:
    a, b = rng.sample(_numeric(s), 2)
    return (f"What is the Pearson correlation between {a} and {b} in {f}? Round to 2 decimals.",
            f'print(round(float(df["{a}"].corr(df["{b}"])), 2))', "number", 2)


def _t_month(rng, f, df, s) -> Draft | None:
    if "date" not in s:
        return None
    num = rng.choice(_numeric(s))
    agg, word = ("sum", "total") if num in s["sum"] else ("mean", "average")
    month = pd.to_datetime(df[s["date"]]).dt.month_name()
    if not _unique_best(df.groupby(month)[num].agg(agg)):
        return None
    return (f"In {f}, in which month is the {word} {num} the highest? Answer with the "
            f"month's full English name (e.g. March).",
            f'month = pd.to_datetime(df["{s["date"]}"]).dt.month_name()\n'
            f'print(df.groupby(month)["{num}"].{agg}().idxmax())', "string", 0)


def _t_month_mean(rng, f, df, s) -> Draft | None:
    if "date" not in s:
        return None
    cat, num = rng.choice(s["cat"]), rng.choice(_numeric(s))
    val = rng.choice(sorted(df[cat].unique()))
    months = pd.to_datetime(df[s["date"]]).dt.month
    m = rng.choice(sorted(months[df[cat] == val].unique()))
    return (f'In {f}, what is the average {num} of the rows where {cat} is "{val}" during {MONTHS[m - 1]}? '
            f"Round to 2 decimals.",
            f'month = pd.to_datetime(df["{s["date"]}"]).dt.month\n'
            f'rows = df[(df["{cat}"] == "{val}") & (month == {m})]\n'
            f'print(round(float(rows["{num}"].mean()), 2))',
            "number", 2)


def _t_max_where(rng, f, df, s) -> Draft:
    cat, num = rng.choice(s["cat"]), rng.choice(_numeric(s))
    val = rng.choice(sorted(df[cat].unique()))
    cast, answer_type = ("int", "integer") if pd.api.types.is_integer_dtype(df[num]) else ("float", "number")
    return (f'What is the largest {num} among the rows of {f} where {cat} is "{val}"?',
            f'print({cast}(df[df["{cat}"] == "{val}"]["{num}"].max()))', answer_type, 3)


def _t_median(rng, f, df, s) -> Draft:
    num = rng.choice(_numeric(s))
    return (f"What is the median {num} in {f}? Round to 2 decimals.",
            f'print(round(float(df["{num}"].median()), 2))', "number", 2)


def _t_distinct(rng, f, df, s) -> Draft | None:
    if len(s["cat"]) < 2:
        return None
    cat, other = rng.sample(s["cat"], 2)
    val = rng.choice(sorted(df[cat].unique()))
    return (f'In {f}, how many different {other} values appear in the rows where {cat} is "{val}"?',
            f'print(int(df[df["{cat}"] == "{val}"]["{other}"].nunique()))', "integer", 0)


def _t_percent(rng, f, df, s) -> Draft:
    cat = rng.choice(s["cat"])
    val = rng.choice(sorted(df[cat].unique()))
    return (f'What percentage of the rows of {f} have {cat} "{val}"? Round to 1 decimal.',
            f'print(round(100 * float((df["{cat}"] == "{val}").mean()), 1))', "number", 1)


def _t_sum_where(rng, f, df, s) -> Draft | None:
    if not s["sum"]:
        return None
    cat, num = rng.choice(s["cat"]), rng.choice(s["sum"])
    val = rng.choice(sorted(df[cat].unique()))
    question = f'What is the total {num} of the rows of {f} where {cat} is "{val}"?'
    if pd.api.types.is_integer_dtype(df[num]):
        return question, f'print(int(df[df["{cat}"] == "{val}"]["{num}"].sum()))', "integer", 0
    return (f"{question} Round to 2 decimals.",
            f'print(round(float(df[df["{cat}"] == "{val}"]["{num}"].sum()), 2))', "number", 2)


def _t_entity_max(rng, f, df, s) -> Draft | None:
    if "entity" not in s:
        return None
    num = rng.choice(_numeric(s))
    if not _unique_best(df[num]):
        return None
    return (f"In {f}, which {s['entity']} has the highest {num}? Answer with the {s['entity']} only.",
            f'print(df.loc[df["{num}"].idxmax(), "{s["entity"]}"])', "string", 0)


def _t_revenue(rng, f, df, s) -> Draft | None:
    if "unit_price" not in df:
        return None
    val = rng.choice(sorted(df["region"].unique()))
    return (f'In {f}, the revenue of a row is units times unit_price. What is the total '
            f'revenue of region "{val}"? '
            f"Round to 2 decimals.",
            'revenue = df["units"] * df["unit_price"]\n'
            f'print(round(float(revenue[df["region"] == "{val}"].sum()), 2))',
            "number", 2)


_JOIN = ('products = pd.read_csv("products.csv")\nmerged = df.merge(products, on="product")\n')


def _t_join_top(rng, f, df, s) -> Draft | None:
    if "product" not in df:
        return None
    merged = df.merge(pd.DataFrame([{"product": p, "category": c, "supplier": sup}
                                    for p, (c, sup, _) in PRODUCTS.items()]), on="product")
    group = rng.choice(["category", "supplier"])
    if rng.random() < 0.5:
        if not _unique_best((merged["units"] * merged["unit_price"]).groupby(merged[group]).sum()):
            return None
        return (f"Using {f} and products.csv (each product's category and supplier), which {group} has the "
                f"highest total revenue (units times unit_price)? Answer with the {group} only.",
                _JOIN + f'revenue = merged["units"] * merged["unit_price"]\n'
                        f'print(revenue.groupby(merged["{group}"]).sum().idxmax())', "string", 0)
    val = rng.choice(sorted(merged[group].unique()))
    return (f'Using {f} and products.csv (each product\'s category and supplier), how many units of products '
            f'whose {group} is "{val}" were sold in total?',
            _JOIN + f'print(int(merged[merged["{group}"] == "{val}"]["units"].sum()))', "integer", 0)


# name -> template (a question is drawn from each in turn, in the order of the names)
TEMPLATES: dict[str, Callable[..., Draft | None]] = {
    "correlation": _t_correlation,
    "count_and": _t_count_and,
    "count_greater": _t_count_greater,
    "distinct": _t_distinct,
    "entity_max": _t_entity_max,
    "join_top": _t_join_top,
    "lowest_mean": _t_lowest_mean,
    "max_where": _t_max_where,
    "mean_where": _t_mean_where,
    "median": _t_median,
    "month": _t_month,
    "month_mean": _t_month_mean,
    "percent": _t_percent,
    "revenue": _t_revenue,
    "sum_where": _t_sum_where,
    "top_total": _t_top_total,
}


def _run_solution(code: str, csv_dir: Path) -> str:
    """The stdout of `code` run in-process in `csv_dir` (trusted generated code only)."""
    out = io.StringIO()
    with contextlib.chdir(csv_dir), contextlib.redirect_stdout(out):
        exec(code, {})
    return out.getvalue().strip()


def _questions(csv_dir: Path, tables: list[str], n: int, seed: int, prefix: str,
               seen: set[str]) -> list[dict[str, Any]]:
    """`n` questions about the given tables (names without ".csv"), none of whose text is in `seen`."""
    rng = random.Random(seed)
    frames = {name: pd.read_csv(csv_dir / f"{name}.csv") for name in tables}
    order = sorted(TEMPLATES)
    # Each table walks through the templates in turn, so that every kind of question is represented;
    # a template whose questions about this table are used up (or that does not fit it) is skipped.
    cursor = {table: rng.randrange(len(order)) for table in tables}
    tasks: list[dict[str, Any]] = []
    while len(tasks) < n:
        table = tables[len(tasks) % len(tables)]
        kind = next(k for k, (train, test) in INSTANCES.items() if table in (*train, test))
        draft = None
        for _ in range(len(order)):
            template = order[cursor[table] % len(order)]
            cursor[table] += 1
            for _ in range(20):
                draft = TEMPLATES[template](rng, f"{table}.csv", frames[table], SCHEMAS[kind])
                if draft is not None and draft[0] not in seen:
                    break
                draft = None
            if draft is not None:
                break
        if draft is None:
            raise RuntimeError(f"no new question about {table}; add templates or tables")
        question, body, answer_type, decimals = draft
        code = f'import pandas as pd\n\ndf = pd.read_csv("{table}.csv")\n{body}\n'
        printed = _run_solution(code, csv_dir)
        if printed in ("nan", "None", ""):
            raise RuntimeError(f"the solution of {question!r} prints {printed!r}")
        files = [f"{table}.csv"] + (["products.csv"] if "products.csv" in code else [])
        if answer_type == "string":
            answer, tolerance = printed, None
        elif answer_type == "integer":
            answer, tolerance = int(printed), {"abs": 0, "rel": 0}
        else:
            answer, tolerance = float(printed), {"abs": 10.0 ** -decimals, "rel": 1e-3}
        seen.add(question)
        tasks.append({"id": f"{prefix}-{len(tasks)}", "question": question, "files": files, "answer": answer,
                      "answer_type": answer_type, "tolerance": tolerance, "solution_code": code,
                      "template": template})
    return tasks



def make_tasks(n: int, seed: int = 0, split: str = "train",
               seen: set[str] | None = None) -> list[dict[str, Any]]:
    """`n` questions of `split`, none of whose text is in `seen` (the new ones are added to it).

    The tables are written from `seed` (`write_csvs`) into a temporary folder; training questions ask
    about the first two instances of each kind, test questions about the third, drawn from the random
    streams 2 * seed and 2 * seed + 1.
    """
    tables = ([name for train, _ in INSTANCES.values() for name in train] if split == "train"
              else [test for _, test in INSTANCES.values()])
    with tempfile.TemporaryDirectory(prefix="data-analysis-tables-") as tmp:
        write_csvs(Path(tmp), seed)
        return _questions(Path(tmp), tables, n, 2 * seed + (split == "test"), f"data_analysis-{split}",
                          set() if seen is None else seen)


def generate(out_dir: Path, seed: int = 0) -> None:
    """Write `csv/*.csv`, `train.jsonl` (240 questions) and `test.jsonl` (60) into `out_dir`."""
    out_dir = Path(out_dir)
    csv_dir = out_dir / CSV_DIR
    if csv_dir.exists():
        shutil.rmtree(csv_dir)  # no stale tables from an older generator
    write_csvs(csv_dir, seed)
    seen: set[str] = set()  # no question text in both splits
    write_jsonl(out_dir / "train.jsonl", make_tasks(N_TRAIN, seed, "train", seen))
    write_jsonl(out_dir / "test.jsonl", make_tasks(N_TEST, seed, "test", seen))
