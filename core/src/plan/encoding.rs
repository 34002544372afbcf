//! How a stage plan travels to its tasks: datafusion-proto with [`LambdaFusionCodec`] for
//! our own nodes, and [`Converter`] for what datafusion-proto 55 drops.
//!
//! datafusion-proto encodes a window function without two of its fields: whether it
//! ignores nulls (`lag(x) IGNORE NULLS` came back as `lag(x)`) and whether DataFusion
//! reversed it to avoid a sort (a reversed `lag` — planned as `lead` evaluated backwards —
//! came back as a plain `lead`, shifted the other way). The converter encodes such a
//! window node with its reversed functions turned back (they round-trip exactly: reversing
//! twice is the identity) and a flag per function, decoding reverses them again; and it
//! sets the encoded `ignore_nulls` that the decoder already reads. A window aggregate's
//! `FILTER` has no public accessor at all: it is rewritten before physical planning
//! ([`super::rules::WindowFilterToCase`]). And an aggregate grouped by empty grouping
//! sets only (`GROUP BY GROUPING SETS (())`, one row even over no input) came back with
//! no grouping at all — its partial stage then wrote no row: the converter carries the
//! number of sets. A scan of compressed CSV or JSON files came back uncompressed (the
//! task read gzip bytes as text): the converter carries the compression. Those of our
//! nodes that hold a plan are decoded in the converter's context, which inside a
//! `ScalarSubqueryExec` carries the subqueries' results. `tests` below round-trips every operator the engine plans and runs
//! both plans.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::{CastExpr, Literal};
use datafusion::physical_expr::window::{
    PlainAggregateWindowExpr, SlidingAggregateWindowExpr, StandardWindowExpr, WindowExpr,
};
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec, WindowUDFExpr};
use datafusion::physical_plan::{ExecutionPlan, PhysicalExpr};
use datafusion_proto::bytes::{
    physical_plan_from_bytes_with_proto_converter, physical_plan_to_bytes_with_proto_converter,
};
use datafusion_proto::physical_plan::from_proto::parse_physical_expr_with_converter;
use datafusion_proto::physical_plan::to_proto::serialize_physical_expr_with_converter;
use datafusion_proto::physical_plan::{
    PhysicalExtensionCodec, PhysicalPlanDecodeContext, PhysicalPlanNodeExt,
    PhysicalProtoConverterExtension,
};
use datafusion_proto::protobuf::{self, physical_plan_node::PhysicalPlanType};
use prost::Message;

use datafusion::physical_plan::aggregates::{AggregateExec, PhysicalGroupBy};

use crate::shuffle::codec::{
    CompressedScanNode, EmptyGroupingSetsNode, LambdaFusionNode, WindowNode,
};
use crate::shuffle::LambdaFusionCodec;
use crate::Result;
use datafusion::common::parsers::CompressionTypeVariant;
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::datasource::physical_plan::{FileScanConfig, FileScanConfigBuilder};
use datafusion::datasource::source::DataSourceExec;

/// Encodes a stage plan to bytes.
pub fn encode_plan(plan: Arc<dyn ExecutionPlan>) -> Result<Vec<u8>> {
    Ok(physical_plan_to_bytes_with_proto_converter(plan, &LambdaFusionCodec, &Converter)?.to_vec())
}

/// Decodes a stage plan; `ctx` must resolve every object store the plan reads.
pub fn decode_plan_unchecked(bytes: &[u8], ctx: &TaskContext) -> Result<Arc<dyn ExecutionPlan>> {
    Ok(physical_plan_from_bytes_with_proto_converter(
        bytes,
        ctx,
        &LambdaFusionCodec,
        &Converter,
    )?)
}

/// datafusion-proto's conversion, with the window fields it drops carried along.
#[derive(Debug, Default, Clone, Copy)]
pub struct Converter;

/// What a window function carries beyond its encoding.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct WindowFlags {
    /// DataFusion reversed it (evaluates it backwards over a reversed order).
    reversed: bool,
    /// `IGNORE NULLS`.
    ignore_nulls: bool,
}

/// Builds a window node again over the same input with other functions.
type RebuildWindow = Box<dyn Fn(Vec<Arc<dyn WindowExpr>>) -> DfResult<Arc<dyn ExecutionPlan>>>;

/// A window node's functions and how to build it again with others.
struct WindowNodeParts {
    exprs: Vec<Arc<dyn WindowExpr>>,
    rebuild: RebuildWindow,
}

fn window_parts(plan: &Arc<dyn ExecutionPlan>) -> Option<WindowNodeParts> {
    if let Some(w) = plan.downcast_ref::<WindowAggExec>() {
        let input = w.input().clone();
        let can_repartition = !w.partition_keys().is_empty();
        return Some(WindowNodeParts {
            exprs: w.window_expr().to_vec(),
            rebuild: Box::new(move |exprs| {
                Ok(Arc::new(WindowAggExec::try_new(
                    exprs,
                    input.clone(),
                    can_repartition,
                )?) as Arc<dyn ExecutionPlan>)
            }),
        });
    }
    if let Some(w) = plan.downcast_ref::<BoundedWindowAggExec>() {
        let input = w.input().clone();
        let mode = w.input_order_mode.clone();
        let can_repartition = !w.partition_keys().is_empty();
        return Some(WindowNodeParts {
            exprs: w.window_expr().to_vec(),
            rebuild: Box::new(move |exprs| {
                Ok(Arc::new(BoundedWindowAggExec::try_new(
                    exprs,
                    input.clone(),
                    mode.clone(),
                    can_repartition,
                )?) as Arc<dyn ExecutionPlan>)
            }),
        });
    }
    None
}

/// The value of the last `field: value` of a `Debug` rendering (the struct's own field:
/// `WindowUDFExpr` derives `Debug` and lists `is_reversed` and `ignore_nulls` last,
/// after its function and arguments). The fields have no accessor in DataFusion 55.
fn debug_flag(debug: &str, field: &str) -> bool {
    debug
        .rfind(&format!("{field}: "))
        .map(|i| debug[i + field.len() + 2..].starts_with("true"))
        .unwrap_or(false)
}

fn flags(expr: &Arc<dyn WindowExpr>) -> WindowFlags {
    if let Some(standard) = expr.as_any().downcast_ref::<StandardWindowExpr>() {
        if let Some(udf) = standard
            .get_standard_func_expr()
            .as_any()
            .downcast_ref::<WindowUDFExpr>()
        {
            let debug = format!("{udf:?}");
            return WindowFlags {
                reversed: debug_flag(&debug, "is_reversed"),
                ignore_nulls: debug_flag(&debug, "ignore_nulls"),
            };
        }
    }
    let aggregate = if let Some(a) = expr.as_any().downcast_ref::<PlainAggregateWindowExpr>() {
        Some(a.get_aggregate_expr())
    } else {
        expr.as_any()
            .downcast_ref::<SlidingAggregateWindowExpr>()
            .map(|a| a.get_aggregate_expr())
    };
    WindowFlags {
        // An aggregate's IGNORE NULLS is encoded; its reversal is not.
        reversed: aggregate.is_some_and(|a| a.is_reversed()),
        ignore_nulls: false,
    }
}

impl Converter {
    /// Encodes a window node whose functions carry flags datafusion-proto drops.
    fn encode_window(
        &self,
        parts: WindowNodeParts,
        flags: &[WindowFlags],
        codec: &dyn PhysicalExtensionCodec,
    ) -> DfResult<protobuf::PhysicalPlanNode> {
        let unreversed = parts
            .exprs
            .iter()
            .zip(flags)
            .map(|(e, f)| {
                if f.reversed {
                    e.get_reverse_expr().ok_or_else(|| {
                        DataFusionError::NotImplemented(format!(
                            "window function {} is reversed and cannot be turned back",
                            e.name()
                        ))
                    })
                } else {
                    Ok(e.clone())
                }
            })
            .collect::<DfResult<Vec<_>>>()?;
        let plan = (parts.rebuild)(unreversed)?;
        let mut node =
            protobuf::PhysicalPlanNode::try_from_physical_plan_with_converter(plan, codec, self)?;
        if let Some(PhysicalPlanType::Window(window)) = node.physical_plan_type.as_mut() {
            for (expr, f) in window.window_expr.iter_mut().zip(flags) {
                expr.ignore_nulls |= f.ignore_nulls;
            }
        }
        if flags.iter().all(|f| !f.reversed) {
            return Ok(node);
        }
        Ok(extension(LambdaFusionNode {
            window: Some(WindowNode {
                plan: node.encode_to_vec(),
                reversed: flags.iter().map(|f| f.reversed).collect(),
            }),
            ..Default::default()
        }))
    }
}

/// Decodes a window node encoded by [`Converter::encode_window`]: the node, then its
/// reversed functions reversed again.
pub(crate) fn decode_window(
    node: &WindowNode,
    ctx: &PhysicalPlanDecodeContext<'_>,
    converter: &dyn PhysicalProtoConverterExtension,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let proto = protobuf::PhysicalPlanNode::decode(node.plan.as_slice())
        .map_err(|e| DataFusionError::Internal(format!("window node: {e}")))?;
    let plan = converter.proto_to_execution_plan(&proto, ctx)?;
    let parts = window_parts(&plan).ok_or_else(|| {
        DataFusionError::Internal(format!("a window node decoded as {}", plan.name()))
    })?;
    if parts.exprs.len() != node.reversed.len() {
        return Err(DataFusionError::Internal(format!(
            "a window node of {} functions with {} flags",
            parts.exprs.len(),
            node.reversed.len()
        )));
    }
    let exprs = parts
        .exprs
        .iter()
        .zip(&node.reversed)
        .map(|(e, reversed)| {
            if *reversed {
                e.get_reverse_expr().ok_or_else(|| {
                    DataFusionError::Internal(format!(
                        "window function {} lost its reversal",
                        e.name()
                    ))
                })
            } else {
                Ok(e.clone())
            }
        })
        .collect::<DfResult<Vec<_>>>()?;
    (parts.rebuild)(exprs)
}

/// `generate_series` / `range` read for none of its columns (`count(*) FROM range(..)`):
/// datafusion-proto writes the projected schema (no fields) but not the projection, and
/// the series read back produces its one column under a schema of none ("number of
/// columns(1) must match number of fields(0)"). Read back with its column, projected
/// to none.
fn generate_series_of_no_columns(
    proto: &protobuf::PhysicalPlanNode,
    ctx: &PhysicalPlanDecodeContext<'_>,
    converter: &Converter,
) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
    use datafusion::arrow::datatypes::{Field, TimeUnit};
    use protobuf::generate_series_node::Args;
    let Some(PhysicalPlanType::GenerateSeries(series)) = &proto.physical_plan_type else {
        return Ok(None);
    };
    if series
        .schema
        .as_ref()
        .is_some_and(|s| !s.columns.is_empty())
    {
        return Ok(None);
    }
    let value_type = match &series.args {
        Some(Args::TimestampArgs(a)) => {
            DataType::Timestamp(TimeUnit::Nanosecond, a.tz.clone().map(Into::into))
        }
        Some(Args::DateArgs(_)) => DataType::Timestamp(TimeUnit::Nanosecond, None),
        _ => DataType::Int64,
    };
    let schema = Schema::new(vec![Field::new("value", value_type, false)]);
    let mut whole = series.clone();
    whole.schema = Some((&schema).try_into()?);
    let node = protobuf::PhysicalPlanNode {
        physical_plan_type: Some(PhysicalPlanType::GenerateSeries(whole)),
    };
    let plan = node.try_into_physical_plan_with_context(ctx, converter)?;
    Ok(Some(Arc::new(
        datafusion::physical_plan::projection::ProjectionExec::try_new(
            Vec::<datafusion::physical_plan::projection::ProjectionExpr>::new(),
            plan,
        )?,
    )))
}

/// The extension node that carries `message` (no inputs: its plan holds them).
fn extension(message: LambdaFusionNode) -> protobuf::PhysicalPlanNode {
    protobuf::PhysicalPlanNode {
        physical_plan_type: Some(PhysicalPlanType::Extension(
            protobuf::PhysicalExtensionNode {
                node: message.encode_to_vec(),
                inputs: vec![],
            },
        )),
    }
}

/// How many empty grouping sets `plan` aggregates by, when it is an aggregate grouped
/// by nothing but those.
fn empty_grouping_sets(plan: &Arc<dyn ExecutionPlan>) -> Option<usize> {
    let aggregate = plan.downcast_ref::<AggregateExec>()?;
    let group_by = aggregate.group_expr();
    (group_by.expr().is_empty() && !group_by.groups().is_empty()).then(|| group_by.groups().len())
}

/// Decodes an aggregate encoded with its empty grouping sets carried aside.
pub(crate) fn decode_empty_grouping_sets(
    node: &EmptyGroupingSetsNode,
    ctx: &PhysicalPlanDecodeContext<'_>,
    converter: &dyn PhysicalProtoConverterExtension,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let proto = protobuf::PhysicalPlanNode::decode(node.plan.as_slice())
        .map_err(|e| DataFusionError::Internal(format!("aggregate node: {e}")))?;
    let plan = converter.proto_to_execution_plan(&proto, ctx)?;
    let aggregate = plan.downcast_ref::<AggregateExec>().ok_or_else(|| {
        DataFusionError::Internal(format!("an aggregate node decoded as {}", plan.name()))
    })?;
    let group_by = PhysicalGroupBy::new(
        vec![],
        vec![],
        vec![vec![]; node.sets as usize],
        aggregate.group_expr().has_grouping_set(),
    );
    let rebuilt = AggregateExec::try_new(
        *aggregate.mode(),
        group_by,
        aggregate.aggr_expr().to_vec(),
        aggregate.filter_expr().to_vec(),
        aggregate.input().clone(),
        aggregate.input_schema(),
    )?
    .with_limit_options(aggregate.limit_options());
    Ok(Arc::new(rebuilt))
}

/// The compression of `plan`'s files, when it scans compressed files.
fn compressed_scan(plan: &Arc<dyn ExecutionPlan>) -> Option<FileCompressionType> {
    let config = plan
        .downcast_ref::<DataSourceExec>()?
        .data_source()
        .downcast_ref::<FileScanConfig>()?;
    config
        .file_compression_type
        .is_compressed()
        .then_some(config.file_compression_type)
}

/// Decodes a scan encoded with its compression carried aside.
fn decode_compressed_scan(
    node: &CompressedScanNode,
    ctx: &PhysicalPlanDecodeContext<'_>,
    converter: &dyn PhysicalProtoConverterExtension,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let proto = protobuf::PhysicalPlanNode::decode(node.plan.as_slice())
        .map_err(|e| DataFusionError::Internal(format!("scan node: {e}")))?;
    let plan = converter.proto_to_execution_plan(&proto, ctx)?;
    let config = plan
        .downcast_ref::<DataSourceExec>()
        .and_then(|d| d.data_source().downcast_ref::<FileScanConfig>())
        .ok_or_else(|| {
            DataFusionError::Internal(format!("a file scan decoded as {}", plan.name()))
        })?;
    let variant: CompressionTypeVariant = node.compression.parse()?;
    let config = FileScanConfigBuilder::from(config.clone())
        .with_file_compression_type(FileCompressionType::from(variant))
        .build();
    Ok(DataSourceExec::from_data_source(config))
}

impl PhysicalProtoConverterExtension for Converter {
    fn proto_to_execution_plan(
        &self,
        proto: &protobuf::PhysicalPlanNode,
        ctx: &PhysicalPlanDecodeContext<'_>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if let Some(plan) = generate_series_of_no_columns(proto, ctx, self)? {
            return Ok(plan);
        }
        // Our nodes that carry a plan of their own are decoded here, in `ctx`, rather
        // than by the codec, which is given a fresh context: inside a
        // `ScalarSubqueryExec`, `ctx` holds the subqueries' results that the
        // expressions of that plan read.
        if let Some(PhysicalPlanType::Extension(extension)) = &proto.physical_plan_type {
            if let Ok(node) = LambdaFusionNode::decode(extension.node.as_slice()) {
                if let Some(window) = &node.window {
                    return decode_window(window, ctx, self);
                }
                if let Some(sets) = &node.empty_grouping_sets {
                    return decode_empty_grouping_sets(sets, ctx, self);
                }
                if let Some(scan) = &node.compressed_scan {
                    return decode_compressed_scan(scan, ctx, self);
                }
                if let Some(single) = &node.single_task {
                    let proto = protobuf::PhysicalPlanNode::decode(single.plan.as_slice())
                        .map_err(|e| DataFusionError::Internal(format!("single-task plan: {e}")))?;
                    let inner = self.proto_to_execution_plan(&proto, ctx)?;
                    return Ok(Arc::new(crate::plan::single_task::SingleTaskExec::new(
                        inner,
                    )));
                }
            }
        }
        proto.try_into_physical_plan_with_context(ctx, self)
    }

    fn execution_plan_to_proto(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        codec: &dyn PhysicalExtensionCodec,
    ) -> DfResult<protobuf::PhysicalPlanNode> {
        if let Some(parts) = window_parts(plan) {
            let flags: Vec<WindowFlags> = parts.exprs.iter().map(flags).collect();
            if flags.iter().any(|f| *f != WindowFlags::default()) {
                return self.encode_window(parts, &flags, codec);
            }
        }
        if crate::shuffle::codec::is_extension(plan) {
            // As datafusion-proto encodes extension nodes, but with their inputs through
            // this converter (its own encodes them past it, so a window or aggregate right
            // under a shuffle writer lost what the converter carries).
            let mut node = Vec::new();
            codec.try_encode(Arc::clone(plan), &mut node, self)?;
            let inputs = crate::shuffle::codec::extension_inputs(plan)?
                .iter()
                .map(|child| self.execution_plan_to_proto(child, codec))
                .collect::<DfResult<Vec<_>>>()?;
            return Ok(protobuf::PhysicalPlanNode {
                physical_plan_type: Some(PhysicalPlanType::Extension(
                    protobuf::PhysicalExtensionNode { node, inputs },
                )),
            });
        }
        // The node as datafusion-proto encodes it, wrapped with what that encoding drops.
        let encoded = || {
            protobuf::PhysicalPlanNode::try_from_physical_plan_with_converter(
                Arc::clone(plan),
                codec,
                self,
            )
            .map(|node| node.encode_to_vec())
        };
        if let Some(compression) = compressed_scan(plan) {
            return Ok(extension(LambdaFusionNode {
                compressed_scan: Some(CompressedScanNode {
                    plan: encoded()?,
                    compression: compression.get_variant().to_string(),
                }),
                ..Default::default()
            }));
        }
        if let Some(sets) = empty_grouping_sets(plan) {
            return Ok(extension(LambdaFusionNode {
                empty_grouping_sets: Some(EmptyGroupingSetsNode {
                    plan: encoded()?,
                    sets: sets as u32,
                }),
                ..Default::default()
            }));
        }
        protobuf::PhysicalPlanNode::try_from_physical_plan_with_converter(
            Arc::clone(plan),
            codec,
            self,
        )
    }

    fn proto_to_physical_expr(
        &self,
        proto: &protobuf::PhysicalExprNode,
        input_schema: &Schema,
        ctx: &PhysicalPlanDecodeContext<'_>,
    ) -> DfResult<Arc<dyn PhysicalExpr>> {
        let expr = parse_physical_expr_with_converter(proto, input_schema, ctx, self)?;
        // A Float16 literal as it travels (see `physical_expr_to_proto`), folded back.
        if let Some(cast) = expr.downcast_ref::<CastExpr>() {
            if let (DataType::Float16, Some(literal)) =
                (cast.cast_type(), cast.expr().downcast_ref::<Literal>())
            {
                if let value @ ScalarValue::Float32(Some(_)) = literal.value() {
                    return Ok(Arc::new(Literal::new(value.cast_to(&DataType::Float16)?)));
                }
            }
        }
        Ok(expr)
    }

    fn physical_expr_to_proto(
        &self,
        expr: &Arc<dyn PhysicalExpr>,
        codec: &dyn PhysicalExtensionCodec,
    ) -> DfResult<protobuf::PhysicalExprNode> {
        // datafusion-proto writes a Float16 value as a Float32 one and reads it back as
        // Float32 (`IN (arrow_cast(1, 'Float16'))` then compares Float16 with Float32, a
        // Float16 result column comes back Float32): a Float16 literal travels as a
        // Float32 literal cast back to Float16.
        if let Some(literal) = expr.downcast_ref::<Literal>() {
            if let ScalarValue::Float16(Some(value)) = literal.value() {
                let cast: Arc<dyn PhysicalExpr> = Arc::new(CastExpr::new(
                    Arc::new(Literal::new(ScalarValue::Float32(Some(f32::from(*value))))),
                    DataType::Float16,
                    None,
                ));
                return serialize_physical_expr_with_converter(&cast, codec, self);
            }
        }
        serialize_physical_expr_with_converter(expr, codec, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_plan::{collect, displayable};
    use datafusion::prelude::SessionContext;

    #[test]
    fn the_last_debug_field_is_read() {
        let d = "WindowUDFExpr { fun: X { is_reversed: false }, name: \"lag\", is_reversed: true, ignore_nulls: false }";
        assert!(debug_flag(d, "is_reversed"));
        assert!(!debug_flag(d, "ignore_nulls"));
        assert!(!debug_flag("nothing", "is_reversed"));
    }

    /// Every operator the engine plans, round-tripped: the decoded plan displays as the
    /// planned one (with its window functions' flags) and runs to the same rows.
    #[tokio::test]
    async fn plans_round_trip_field_by_field_and_run_alike() {
        let ctx = SessionContext::new_with_config(
            datafusion::prelude::SessionConfig::new().with_target_partitions(2),
        );
        ctx.sql(
            "CREATE TABLE t (k INT, x INT, s VARCHAR) AS VALUES \
             (1, 10, 'a'), (1, NULL, 'b'), (2, 30, NULL), (2, NULL, 'd'), (3, 50, 'e'), \
             (3, 60, 'f'), (1, 70, 'g'), (2, 80, 'h')",
        )
        .await
        .unwrap();
        let queries = [
            "SELECT k, x, lag(x) IGNORE NULLS OVER (ORDER BY x, s) FROM t",
            "SELECT k, x, lead(x) IGNORE NULLS OVER (PARTITION BY k ORDER BY s) FROM t",
            "SELECT k, first_value(x) IGNORE NULLS OVER (PARTITION BY k ORDER BY s), \
             last_value(x) IGNORE NULLS OVER (PARTITION BY k ORDER BY s \
             ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING), \
             nth_value(x, 2) IGNORE NULLS OVER (PARTITION BY k ORDER BY s \
             ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) FROM t",
            // One ascending, one descending: DataFusion reverses one of them.
            "SELECT x, LAG(x) OVER (ORDER BY x ASC), LEAD(x) OVER (ORDER BY x DESC) FROM t",
            "SELECT s, first_value(s) OVER (ORDER BY s DESC), last_value(s) OVER (ORDER BY s) \
             FROM t",
            "SELECT k, sum(x) OVER (ORDER BY k ROWS BETWEEN 1 PRECEDING AND CURRENT ROW), \
             sum(x) OVER (ORDER BY k DESC ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM t",
            "SELECT k, row_number() OVER (PARTITION BY k ORDER BY x), rank() OVER (ORDER BY k) \
             FROM t",
            "SELECT k, count(x), sum(x) FILTER (WHERE x > 20), array_agg(s ORDER BY s) \
             FROM t GROUP BY k",
            "SELECT k, x FROM t WHERE x IN (SELECT x FROM t WHERE k = 2) ORDER BY x LIMIT 3",
            "SELECT a.k, b.s FROM t a JOIN t b ON a.k = b.k AND a.x < b.x",
            "SELECT k FROM t UNION ALL SELECT k + 1 FROM t",
            "SELECT k, x FROM t EXCEPT SELECT k, x FROM t WHERE k = 1",
            "SELECT * FROM t a LEFT JOIN t b ON a.x = b.x WHERE b.k IS NULL",
            "SELECT count(*), sum(x) FROM t GROUP BY GROUPING SETS (())",
            "SELECT k, count(*) FROM t GROUP BY GROUPING SETS ((k), ())",
            "SELECT k, s, count(*) FROM t GROUP BY CUBE (k, s)",
            // A series read for none of its columns.
            "SELECT count(*) FROM range(1, 100)",
            "SELECT count(*) FROM generate_series(1, 10) a, generate_series(1, 3) b",
            // Float16 values travel as Float16.
            "SELECT arrow_cast(1.5, 'Float16') AS f, \
             arrow_cast(k, 'Float16') IN (arrow_cast(1.0, 'Float16'), arrow_cast(3.0, 'Float16')) FROM t",
            // Recursive queries travel whole, their work table readers with them.
            "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) \
             SELECT * FROM r",
            "WITH RECURSIVE r(k, x, d) AS (SELECT k, x, 1 FROM t WHERE x IS NOT NULL \
             UNION ALL SELECT r.k, r.x + 1, d + 1 FROM r WHERE d < 3) SELECT k, x FROM r",
        ];
        for sql in queries {
            let df = ctx.sql(sql).await.unwrap();
            let planned = df.create_physical_plan().await.unwrap();
            // As a stage plan: under a shuffle writer, whose input the converter encodes.
            let plan: Arc<dyn ExecutionPlan> =
                Arc::new(crate::shuffle::ShuffleWriterExec::try_new(0, planned, None).unwrap());
            let bytes = encode_plan(plan.clone()).unwrap();
            let decoded = decode_plan_unchecked(&bytes, &ctx.task_ctx()).unwrap();
            let shown =
                |p: &Arc<dyn ExecutionPlan>| displayable(p.as_ref()).indent(true).to_string();
            // A decoded recursive query projects its static term to its schema again (a
            // cast the optimizer had merged away comes back), and a series read for no
            // columns gains the projection it lost: compared by their answers.
            let display_differs =
                sql.starts_with("WITH RECURSIVE") || sql.starts_with("SELECT count(*) FROM");
            if !display_differs {
                assert_eq!(shown(&plan), shown(&decoded), "{sql}");
            }
            let debug_windows = |p: &Arc<dyn ExecutionPlan>| {
                let mut out = Vec::new();
                let _ = datafusion::common::tree_node::TreeNode::apply(p, |node| {
                    if let Some(parts) = window_parts(node) {
                        out.extend(parts.exprs.iter().map(|e| format!("{:?}", flags(e))));
                    }
                    Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
                });
                out
            };
            assert_eq!(debug_windows(&plan), debug_windows(&decoded), "{sql}");
            let sorted = |batches: Vec<datafusion::arrow::array::RecordBatch>| {
                let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
                    .unwrap()
                    .to_string();
                let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
                lines.sort();
                lines
            };
            // The writer runs only in the executor: run what it writes.
            let input = |p: &Arc<dyn ExecutionPlan>| p.children()[0].clone();
            let expected = sorted(collect(input(&plan), ctx.task_ctx()).await.unwrap());
            let actual = sorted(collect(input(&decoded), ctx.task_ctx()).await.unwrap());
            assert_eq!(expected, actual, "{sql}");
        }
    }
}
