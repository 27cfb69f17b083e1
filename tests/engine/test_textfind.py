"""Lines found by a literal in a whole text: numbered by newline as the scanner numbers them."""
from gpudoctor.engine.textfind import line_at, lines_with

TEXT = "a -> b\r\nnode:1 -> 3\nprogress 10%\rprogress 50%\n\nx.cc:87 -> 2 -> 2\nlast -> 9"


def test_lines_with_numbers_each_line_once_and_drops_the_line_ending():
    assert list(lines_with(TEXT, " -> ")) == [(1, "a -> b"), (2, "node:1 -> 3"), (5, "x.cc:87 -> 2 -> 2"),
                                               (6, "last -> 9")]


def test_keep_skips_an_occurrence_but_not_a_later_one_on_the_same_line():
    after_digit = lambda text, at: text[at - 1: at].isdigit()  # noqa: E731
    assert [n for n, _ in lines_with(TEXT, " -> ", after_digit)] == [2, 5]
    assert list(lines_with("b -> 0 and 1 -> 2", " -> ", after_digit)) == [(1, "b -> 0 and 1 -> 2")]


def test_line_at_counts_a_carriage_return_as_part_of_its_line():
    assert line_at(TEXT, TEXT.index("50%")) == (3, "progress 10%\rprogress 50%")
    assert line_at(TEXT, len(TEXT) - 1) == (6, "last -> 9")
    assert list(lines_with(TEXT, "absent")) == []
