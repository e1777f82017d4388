"""An example Converter: adds a field computed from another (1:1)."""

from __future__ import annotations

from collections.abc import Iterable

from spark_pipeline.constructs import Converter, Record, Schema, WorkUnitState


class AmountInCents(Converter):
    """Adds `amount_cents` (amount × 100) to each synthetic record."""

    def convert_schema(self, input_schema: Schema, state: WorkUnitState) -> Schema:
        fields = [*input_schema["fields"], {"name": "amount_cents", "type": "long"}]
        return {**input_schema, "fields": fields}

    def convert_record(self, output_schema: Schema, record: Record, state: WorkUnitState) -> Iterable[Record]:
        yield {**record, "amount_cents": record["amount"] * 100}
