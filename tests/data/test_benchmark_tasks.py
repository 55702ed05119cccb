"""SQuAD, CNN/Daily Mail and WMT: real local rows against strings written out by hand from the t5 library's
rules (``t5/data/preprocessors.py``: squad + _pad_punctuation, summarize, translate), hub fixtures in the hub's
row format for what is not local, and the sources' errors."""

import itertools
import string

import pytest

from t2t.data.preprocessors import pad_punctuation, qa
from t2t.data.sources import DataNotFoundError, HFDataset, LocalOrHub
from t2t.data.task import get_task
from t2t.errors import T2TError

SUPER_BOWL_CONTEXT = (
    "Super Bowl 50 was an American football game to determine the champion of the National Football League "
    "( NFL ) for the 2015 season . The American Football Conference ( AFC ) champion Denver Broncos defeated "
    "the National Football Conference ( NFC ) champion Carolina Panthers 24–10 to earn their third Super Bowl "
    "title . The game was played on February 7 , 2016 , at Levi ' s Stadium in the San Francisco Bay Area at "
    "Santa Clara , California . As this was the 50th Super Bowl , the league emphasized the \" golden "
    "anniversary \" with various gold - themed initiatives , as well as temporarily suspending the tradition "
    "of naming each Super Bowl game with Roman numerals ( under which the game would have been known as "
    "\" Super Bowl L \" ) , so that the logo could prominently feature the Arabic numerals 50 . ")


def first(task, split, data_dir, n):
    return list(itertools.islice(get_task(task).text_examples(split, data_dir), n))


# ---------------------------------------------------------------------------------------------- SQuAD

def test_pad_punctuation_follows_re2_ascii_classes():
    # RE2's [[:punct:]] is ASCII punctuation, "_" included: accented letters and dashes stay as they are
    assert pad_punctuation("Levi's 24–10,  café?") == "Levi ' s 24–10 , café ? "
    assert pad_punctuation("Beyoncé's snake_case [1]") == "Beyoncé ' s snake _ case [ 1 ] "
    assert pad_punctuation(string.punctuation) == " " + " ".join(string.punctuation) + " "
    # runs of RE2's \s collapse, ends are kept; a non-breaking space is not RE2's space
    assert pad_punctuation("a\tb\n\nc\u00a0 d") == "a b c\u00a0 d"


def test_squad_dev_rows_match_t5_strings(data_dir):
    rows = first("squad_v010_allanswers", "validation", data_dir, 3)
    assert rows[0]["inputs"] == ("question: Which NFL team represented the AFC at Super Bowl 50 ? context: "
                                 + SUPER_BOWL_CONTEXT)
    assert rows[0]["targets"] == "Denver Broncos"
    assert rows[1]["inputs"] == ("question: Which NFL team represented the NFC at Super Bowl 50 ? context: "
                                 + SUPER_BOWL_CONTEXT)
    assert rows[1]["targets"] == "Carolina Panthers"
    assert rows[2]["inputs"].startswith("question: Where did Super Bowl 50 take place ? context: Super Bowl 50 ")
    assert rows[2]["targets"] == "Santa Clara , California"
    # every answer is kept (padded) for the metric, which takes the best
    all_answers = ["Santa Clara , California", "Levi ' s Stadium",
                   "Levi ' s Stadium in the San Francisco Bay Area at Santa Clara , California . "]
    assert rows[2]["answers"] == all_answers
    assert qa("x", example=rows[2], is_target=True) == all_answers
    assert qa("Levi's Stadium", example=rows[2]) == "Levi's Stadium"
    assert rows[2]["id"] == "56be4db0acb8001400a502ee"


def test_squad_dev_size_and_last_row(data_dir):
    rows = list(get_task("squad").text_examples("validation", data_dir))
    assert len(rows) == 10_570
    assert rows[-1]["inputs"].startswith(
        "question: What is the seldom used force unit equal to one thousand newtons ? context: ")
    assert rows[-1]["targets"] == "sthène"


SQUAD_TRAIN_ROW = {
    "id": "5733be284776f41900661182", "title": "University_of_Notre_Dame",
    "context": "Architecturally, the school has a Catholic character. Atop the Main Building's gold dome is a "
               "golden statue of the Virgin Mary.",
    "question": "What sits on top of the Main Building at Notre Dame?",
    "answers": {"text": ["a golden statue of the Virgin Mary"], "answer_start": [92]}}


def write_hub_repo(root, config, split, rows, features):
    """A folder laid out like a hub dataset repo (parquet + README configs) that datasets.load_dataset reads."""
    import datasets
    (root / config).mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(root / config / f"{split}-00000.parquet"))
    (root / "README.md").write_text(f"---\nconfigs:\n- config_name: {config}\n  data_files:\n  - split: {split}\n"
                                    f"    path: {config}/{split}-*\n---\n")
    return str(root)


def test_squad_train_from_the_hub_format(tmp_path):
    import datasets

    from t2t.tasks.squad import make_squad_task, squad_source
    features = datasets.Features({
        "id": datasets.Value("string"), "title": datasets.Value("string"), "context": datasets.Value("string"),
        "question": datasets.Value("string"),
        "answers": datasets.Sequence({"text": datasets.Value("string"), "answer_start": datasets.Value("int32")})})
    hub = write_hub_repo(tmp_path / "hub", "plain_text", "train", [SQUAD_TRAIN_ROW], features)
    task = make_squad_task(squad_source(hub))
    (tmp_path / "no-local-copy").mkdir()  # a data dir without the files (a missing one is an error)
    (row,) = task.text_examples("train", tmp_path / "no-local-copy")
    assert row["inputs"] == ("question: What sits on top of the Main Building at Notre Dame ? context: "
                             "Architecturally , the school has a Catholic character . Atop the Main Building ' s "
                             "gold dome is a golden statue of the Virgin Mary . ")
    assert row["targets"] == "a golden statue of the Virgin Mary"


def test_local_squad_rows_have_the_hub_shape(data_dir):
    from t2t.tasks.squad import squad_source
    row = next(iter(squad_source().load("validation", data_dir)))
    assert set(row) == set(SQUAD_TRAIN_ROW)
    assert row["answers"] == {"text": ["Denver Broncos"] * 3, "answer_start": [177] * 3}


# ---------------------------------------------------------------------------------------------- WMT

def test_newstest2014_en_de_rows(data_dir):
    rows = first("wmt_t2t_ende_v003", "test", data_dir, 2)
    assert rows[0]["inputs"] == "translate English to German: Gutach: Increased safety for pedestrians"
    assert rows[0]["targets"] == "Gutach: Noch mehr Sicherheit für Fußgänger"
    assert rows[1]["inputs"] == (
        "translate English to German: They are not even 100 metres apart: On Tuesday, the new B 33 pedestrian "
        "lights in Dorfparkplatz in Gutach became operational - within view of the existing Town Hall traffic "
        "lights.")
    assert rows[1]["targets"].startswith("Sie stehen keine 100 Meter voneinander entfernt: Am Dienstag ist in")
    assert sum(1 for _ in get_task("wmt_ende").text_examples("test", data_dir)) == 3003


def test_newstest2014_en_fr_is_the_validation_split(data_dir):
    rows = first("wmt15_enfr_v003", "validation", data_dir, 2)
    assert rows[0]["inputs"] == "translate English to French: Spectacular Wingsuit Jump Over Bogota"
    assert rows[0]["targets"] == 'Spectaculaire saut en "wingsuit" au-dessus de Bogota'
    assert rows[1]["targets"] == ("Le sportif Jhonathan Florez a sauté jeudi d'un hélicoptère au-dessus de "
                                  "Bogota, la capitale colombienne.")


def test_newsdev_and_newstest2016_en_ro(data_dir):
    dev = first("wmt16_enro_v003", "validation", data_dir, 1)[0]
    assert dev["inputs"] == ("translate English to Romanian: Brazil's Former Presidential Chief-of-Staff to "
                             "Stand Trial")
    assert dev["targets"] == "Fostul șef al cabinetului prezidențial brazilian este adus în fața instanței"
    test = first("wmt16_enro_v003", "test", data_dir, 1)[0]
    assert test["inputs"] == "translate English to Romanian: UN Chief Says There Is No Military Solution in Syria"
    assert test["targets"] == "Șeful ONU declară că nu există soluții militare în Siria"
    assert sum(1 for _ in get_task("wmt_enro").text_examples("test", data_dir)) == 1999


def test_wmt_train_from_the_hub_format(tmp_path):
    import datasets

    from t2t.tasks.wmt import make_wmt_task, wmt_source
    features = datasets.Features({"translation": datasets.Translation(languages=["ro", "en"])})
    rows = [{"translation": {"ro": "Bună ziua.", "en": "Good day."}}]
    hub = write_hub_repo(tmp_path / "hub", "ro-en", "train", rows, features)
    task = make_wmt_task("wmt16_enro_v003", wmt_source("wmt16_enro_v003", hub))
    (tmp_path / "no-local-copy").mkdir()  # a data dir without the files (a missing one is an error)
    (row,) = task.text_examples("train", tmp_path / "no-local-copy")
    assert (row["inputs"], row["targets"]) == ("translate English to Romanian: Good day.", "Bună ziua.")


def test_misaligned_test_set_is_one_clear_error(tmp_path):
    folder = tmp_path / "wmt" / "en-ro"
    folder.mkdir(parents=True)
    (folder / "newstest2016-enro.en").write_text("one\ntwo\n")
    (folder / "newstest2016-enro.ro").write_text("unu\n")
    with pytest.raises(T2TError, match="must be aligned"):
        list(get_task("wmt_enro").text_examples("test", tmp_path))


def test_missing_split_names_the_local_files_and_the_hub(tmp_path):
    with pytest.raises(DataNotFoundError) as info:
        list(get_task("wmt_ende").text_examples("validation", tmp_path))
    message = str(info.value)
    assert "wmt/en-de/newstest2013-src.en.sgm" in message and "wmt14" in message and "\n" not in message


# ---------------------------------------------------------------------------------------------- CNN/DM

def test_cnn_dailymail_local_test_row(data_dir):
    row = first("cnn_dailymail_v002", "test", data_dir, 1)[0]
    assert row["inputs"].startswith("summarize: Club Tijuana star Juan Arango conjured memories Luis Suarez in "
                                    "his team's 4-3 defeat by Monterrey in the Mexican league - but it was")
    assert row["inputs"].endswith("He has made 121 appearances for Venezuela. \xa0.")
    # highlights separated by runs of spaces in the file become the hub's newline-separated highlights
    assert row["targets"] == ("Juan Arango escaped punishment from the referee for biting Jesus Zavela.\n"
                              "He could face a retrospective punishment for the incident.\n"
                              "Arango had earlier scored a free kick in his team's 4-3 defeat\xa0.")


def test_cnn_dailymail_from_the_hub_format(tmp_path):
    import datasets

    from t2t.tasks.cnn_dailymail import cnn_dailymail_source, make_cnn_dailymail_task
    features = datasets.Features({"article": datasets.Value("string"), "highlights": datasets.Value("string"),
                                  "id": datasets.Value("string")})
    rows = [{"article": "(CNN) -- A cat sat on a mat. It was warm.", "highlights": "Cat sits on mat .\nIt is warm .",
             "id": "0001"}]
    hub = write_hub_repo(tmp_path / "hub", "3.0.0", "validation", rows, features)
    task = make_cnn_dailymail_task(cnn_dailymail_source(hub))
    (tmp_path / "no-local-copy").mkdir()  # a data dir without the files (a missing one is an error)
    (row,) = task.text_examples("validation", tmp_path / "no-local-copy")
    assert row["inputs"] == "summarize: (CNN) -- A cat sat on a mat. It was warm."
    assert row["targets"] == "Cat sits on mat .\nIt is warm ."


def test_local_or_hub_declares_local_availability(tmp_path):
    source = LocalOrHub("thing", HFDataset("nowhere/thing"), {"test": [("a.txt",)]}, lambda paths: [{"x": 1}],
                        splits=("test",))
    assert source.available("test", tmp_path) is None
    (tmp_path / "a.txt").write_text("")
    assert source.available("test", tmp_path) is True
    assert list(source.load("test", tmp_path)) == [{"x": 1}]


def test_t2t_tasks_lists_the_new_tasks_with_sizes_and_local_splits(data_dir, capsys):
    from t2t.cli import show_main, tasks_main
    assert tasks_main(["--data-dir", str(data_dir)]) == 0
    lines = {line.split()[1]: line for line in capsys.readouterr().out.splitlines() if line.startswith("task")}
    assert "[train=87599, validation=10570]" in lines["squad_v010_allanswers"]
    assert "local: validation" in lines["squad_v010_allanswers"]
    assert "local: validation, test" in lines["wmt16_enro_v003"]
    assert "local: test" in lines["wmt_t2t_ende_v003"] and "local: test" in lines["cnn_dailymail_v002"]
    assert show_main(["--task", "wmt_enro", "--split", "test", "-n", "1", "--data-dir", str(data_dir)]) == 0
    assert capsys.readouterr().out == ('{"inputs": "translate English to Romanian: UN Chief Says There Is No '
                                       'Military Solution in Syria", "targets": "Șeful ONU declară că nu există '
                                       'soluții militare în Siria"}\n')
