"""Merge-on-read deletes written the way Athena, Spark and Trino write them (Parquet position
delete files of `file_path` and `pos`, in a manifest of content "deletes"), for tables
written by PyIceberg, which reads such files but writes deletes only as copy-on-write
(0.12). The delete files are written through the table's own FileIO (local or S3) and
committed through PyIceberg's own snapshot producer, so the table stays one PyIceberg can
read: its reader is the tests' oracle.
"""

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestContent, ManifestWriterV2
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _FastAppendFiles
from pyiceberg.typedef import Record

POSITION_SCHEMA = pa.schema([
    pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": b"2147483546"}),
    pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": b"2147483545"}),
])
FILE_PATH_FIELD_ID = 2147483546


class DeleteManifestWriter(ManifestWriterV2):
    def content(self):
        return ManifestContent.DELETES

    @property
    def _meta(self):
        return {**super()._meta, "content": "deletes"}


class AddDeleteFiles(_FastAppendFiles):
    def new_manifest_writer(self, spec):
        return DeleteManifestWriter(spec, self.schema(), self.new_manifest_output(), self._snapshot_id,
                                    self._compression)


def commit_deletes(table, name, content, rows, schema=POSITION_SCHEMA, bounds=None, equality_ids=None,
                   partition=None):
    """Writes `rows` as a delete file of `table` and commits it in a snapshot of its own."""
    path = f"{table.location()}/data/{name}.parquet"
    with table.io.new_output(path).create(overwrite=True) as out:
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), out)
    size = len(table.io.new_input(path))
    delete_file = DataFile.from_args(
        content=content, file_path=path, file_format=FileFormat.PARQUET, partition=partition or Record(),
        record_count=len(rows), file_size_in_bytes=size,
        lower_bounds=bounds, upper_bounds=bounds, equality_ids=equality_ids,
        sort_order_id=None, spec_id=table.metadata.default_spec_id, key_metadata=None)
    with table.transaction() as tx:
        with AddDeleteFiles(operation=Operation.DELETE, transaction=tx, io=table.io) as producer:
            producer.append_data_file(delete_file)


def positions(table, data_file, keep_out, column="id"):
    """The rows of `data_file` (by position) whose `column` value `keep_out` selects."""
    with table.io.new_input(data_file).open() as f:
        values = pq.read_table(f, columns=[column]).column(column).to_pylist()
    return [{"file_path": data_file, "pos": i} for i, v in enumerate(values) if keep_out(v)]


def position_deletes(table, name, data_file, keep_out, column="id", partition=None):
    """Deletes the rows of one data file `keep_out` selects, in a delete file whose
    `file_path` bounds name that file (as Spark writes one file's deletes)."""
    commit_deletes(table, name, DataFileContent.POSITION_DELETES,
                   positions(table, data_file, keep_out, column),
                   bounds={FILE_PATH_FIELD_ID: data_file.encode()}, partition=partition)
