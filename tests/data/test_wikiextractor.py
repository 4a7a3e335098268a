"""WikiExtractor output as a corpus: one text per article, markup and titles dropped, articles left out by title,
validation held out by article, malformed markup refused naming the file and line."""

import html
import re

import pytest

from hfzoo.commands.pretrain import main as pretrain_main
from hfzoo.core.refusals import Refusal
from hfzoo.data.corpus import CorpusError, load_corpus


def _doc(doc_id: int, title: str, *paragraphs: str) -> str:
    url = f"http://en.wikipedia.org/wiki?curid={doc_id}"
    # WikiExtractor escapes the title in the attribute and on the block's first line alike
    return f'<doc id="{doc_id}" url="{url}" title="{html.escape(title)}">\n{html.escape(title)}\n\n' + "".join(p + "\n" for p in paragraphs) + \
        "</doc>\n"  # fmt: skip


ARTICLES = {f"Article {i}": [f"Article {i} is the {i}th article.", f"Its second paragraph, number {i}."]
            for i in range(40)}  # fmt: skip


@pytest.fixture
def wiki_folder(tmp_path):
    """WikiExtractor's layout: AA/wiki_00, AA/wiki_01 (no suffix), 20 articles each; a title with an HTML entity."""
    titles = list(ARTICLES)
    for part, chunk in enumerate((titles[:20], titles[20:])):
        (tmp_path / "AA").mkdir(exist_ok=True)
        (tmp_path / "AA" / f"wiki_0{part}").write_text("".join(_doc(i, t, *ARTICLES[t]) for i, t in enumerate(chunk)))
    (tmp_path / "AA" / "wiki_02").write_text(_doc(99, "Tom & Jerry", "A cat and a mouse."))
    return tmp_path


def test_each_article_is_one_text_without_markup_or_title(wiki_folder):
    corpus = load_corpus(wiki_folder, validation_fraction=0.0, split="train")
    expected = ["\n".join(paragraphs) for paragraphs in ARTICLES.values()] + ["A cat and a mouse."]
    assert corpus["text"][:] == expected
    titled = load_corpus(wiki_folder, validation_fraction=0.0, split="train", keep_titles=True)
    assert titled["text"][0] == "Article 0\n" + expected[0]
    assert titled["text"][-1] == "Tom & Jerry\nA cat and a mouse."


def test_articles_are_left_out_by_title_and_an_unknown_title_is_refused_with_the_closest(wiki_folder):
    kept = load_corpus(wiki_folder, validation_fraction=0.0, split="train",
                       exclude_titles=["Article 3", "Tom & Jerry"])  # fmt: skip
    assert kept["text"][:] == ["\n".join(ARTICLES[title]) for title in ARTICLES if title != "Article 3"]
    with pytest.raises(CorpusError, match=r"'Article 300' \(did you mean 'Article 30'\?\)"):
        load_corpus(wiki_folder, exclude_titles=["Article 300"])
    (wiki_folder / "plain.txt").write_text("a line\n")
    with pytest.raises(CorpusError, match="exclude_titles applies to the articles of WikiExtractor output, and this"):
        load_corpus(wiki_folder / "plain.txt", exclude_titles=["Article 3"])
    with pytest.raises(CorpusError, match="keep_titles applies to the articles of WikiExtractor output, and this"):
        load_corpus(wiki_folder / "plain.txt", keep_titles=True)
    with pytest.raises(CorpusError, match="default corpus: exclude_titles and keep_titles apply to WikiExtractor"):
        load_corpus(exclude_titles=["Article 3"], keep_titles=True)


def test_validation_is_held_out_by_article_and_streaming_reads_the_same(wiki_folder):
    corpus = load_corpus(wiki_folder, validation_fraction=0.2)
    articles = {"\n".join(paragraphs) for paragraphs in ARTICLES.values()} | {"A cat and a mouse."}
    train, validation = set(corpus["train"]["text"]), set(corpus["validation"]["text"])
    assert train and validation and train | validation == articles and not train & validation
    streamed = load_corpus(wiki_folder, validation_fraction=0.2, streaming=True)
    assert [e["text"] for e in streamed["validation"]] == corpus["validation"]["text"][:]


@pytest.mark.parametrize("content, line, message", [
    (_doc(1, "A", "text") + '<doc id="2" url="u" title="B">\nB\nno end\n', 6, r"<doc> never closed with </doc>"),
    ('<doc id="1" url="u" title="A">\nA\n' + _doc(2, "B", "text"), 3, r"a <doc> opens before the <doc> of line 1"),
    (_doc(1, "A", "text") + "</doc>\n", 6, r"</doc> with no <doc> open"),
    (_doc(1, "A", "text") + "stray text\n", 6, r"text outside a <doc> … </doc> block"),
    ('<doc id="1" url="u">\nA\n</doc>\n', 1, r"malformed <doc> line"),
])  # fmt: skip
def test_malformed_markup_is_refused_naming_file_and_line(tmp_path, content, line, message):
    (tmp_path / "wiki_00").write_text(content)
    with pytest.raises(CorpusError, match=rf"wiki_00, line {line}: {message}"):
        load_corpus(tmp_path, validation_fraction=0.0)


def test_a_non_utf8_byte_is_refused_naming_file_and_line(tmp_path):
    (tmp_path / "wiki_00").write_bytes(_doc(1, "A", "fine").encode() + _doc(2, "B", "caf\xe9").encode("latin-1"))
    with pytest.raises(CorpusError, match=r"wiki_00, line 9: not valid UTF-8 \(byte 0xe9"):
        load_corpus(tmp_path, validation_fraction=0.0)


def test_the_pretraining_recipe_refuses_a_misspelt_exclusion_before_writing(wiki_folder, tmp_path):
    output_dir = tmp_path / "run"
    with pytest.raises(CorpusError, match=r"'article 3' \(did you mean 'Article 3'\?\)"):
        pretrain_main(["--preset", "bert-tiny", "--objective", "mlm", "--dataset", str(wiki_folder),
                       "--exclude_titles", "[article 3]", "--output_dir", str(output_dir)])  # fmt: skip
    assert not output_dir.exists()


def test_a_real_wikiextractor_file_reads_one_text_per_article(shared_data):
    path = shared_data / "enwiki" / "AA" / "wiki_00"
    raw = path.read_text(encoding="utf-8")
    titles = re.findall(r'^<doc [^>]*title="([^"]*)">$', raw, flags=re.M)
    corpus = load_corpus(path, validation_fraction=0.0, split="train", exclude_titles=[titles[0]])
    texts = corpus["text"][:]
    assert len(titles) == 38 and len(texts) == len(titles) - 1  # every article of this file has text
    assert not any("<doc" in text or "</doc>" in text for text in texts)
    assert texts[0].startswith(titles[1]) and not texts[0].startswith(f"{titles[1]}\n")


def test_a_title_yaml_reads_as_another_type_is_refused_by_its_item(wiki_folder, tmp_path):
    with pytest.raises(Refusal, match=r"'exclude_titles' lists article titles, strings: item 1 \(1984\) is not"):
        pretrain_main(["--preset", "bert-tiny", "--objective", "mlm", "--dataset", str(wiki_folder),
                       "--exclude_titles", "[Article 3, 1984]", "--output_dir", str(tmp_path / "run")])  # fmt: skip
