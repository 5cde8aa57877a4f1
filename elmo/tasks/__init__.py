"""Downstream tasks (NER, POS tagging, sentiment, WSD): dataset readers and task helpers."""
