def check_records(batch: bytes | bytearray | memoryview, sequential: bool, /) -> str | None:
    """None, or why the records of the uncompressed RecordBatch v2 *batch* are invalid (see record_batch)."""
