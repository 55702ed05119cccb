"""Reading fields as text: what a preprocessor gets for a missing, None or non-string field."""

import pytest

from t2t.data.preprocessors import FieldError, prefix_text, text_field
from t2t.errors import T2TError


def test_text_field_returns_text_as_is():
    assert text_field({"text": "a warm film", "label": 1}, "text") == "a warm film"
    assert text_field({"text": ""}, "text") == ""


@pytest.mark.parametrize("example, message", [
    ({"label": "positive"}, "the example has no field 'text' (its fields: label); add 'text' to it, or leave it out "
                            "of the data."),
    ({"text": None, "label": "positive"}, "the example has no field 'text' (its fields: label); add 'text' to it, "
                                          "or leave it out of the data."),  # how datasets fills a missing field
    ({"text": 5}, "the example has 5 in field 'text' where text is expected; make it a string."),
    ({"text": True}, "the example has True in field 'text' where text is expected; make it a string."),
    ({"text": list(range(40))}, "the example has [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16... in "
                                "field 'text' where text is expected; make it a string."),  # cut at 60 characters
])
def test_text_field_refuses_what_is_not_text(example, message):
    with pytest.raises(FieldError) as info:
        text_field(example, "text")
    assert isinstance(info.value, T2TError) and str(info.value) == message


def test_prefix_text_reads_its_field_as_text():
    assert prefix_text({"inputs": "the article"}, prefix="summarize: ") == {"inputs": "summarize: the article"}
    with pytest.raises(FieldError, match="has no field 'inputs'"):
        prefix_text({"inputs": None}, prefix="summarize: ")  # gave "summarize: None"
