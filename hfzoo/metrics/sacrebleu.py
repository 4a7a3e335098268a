"""Corpus BLEU through the sacrebleu package (Post, 2018), so scores are comparable across papers."""

import datasets
import evaluate
import sacrebleu as scb

from .metric_info import metric_info


class Sacrebleu(evaluate.Metric):
    def _info(self):
        return metric_info(
            "sacreBLEU corpus score (13a tokenisation by default).",
            "predictions: list of strings; references: list of lists of strings (same count each).",
            datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Sequence(datasets.Value("string"))}
            ),
            citation="Post (2018), A Call for Clarity in Reporting BLEU Scores.",
        )

    def _compute(self, predictions, references, tokenize="13a", lowercase=False):
        counts = {len(r) for r in references}
        if len(counts) != 1:
            raise ValueError("sacrebleu needs the same number of references for every prediction")
        transposed = [[refs[i] for refs in references] for i in range(counts.pop())]
        result = scb.corpus_bleu(predictions, transposed, tokenize=tokenize, lowercase=lowercase)
        return {"score": result.score, "counts": result.counts, "totals": result.totals,
                "precisions": result.precisions, "bp": result.bp, "sys_len": result.sys_len, "ref_len": result.ref_len}
