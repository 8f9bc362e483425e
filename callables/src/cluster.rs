//! `admin.cluster.status` (issue 23): every node of the cluster — live or gone, its shards,
//! its last heartbeat — and the shard leases, as the store holds them
//! (`switchboard cluster status`, `GET /v1/cluster`). An operator callable.

use async_trait::async_trait;
use protocol::{Effects, ErrorCode};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use switchboard_engine::cluster::ClusterStatus;

use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext};
use crate::registry::{example, output, output_schema, Planned, Tool, ToolOutput, ToolSpec};

pub struct Status;

/// `admin.cluster.status` takes nothing.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusInput {}

#[async_trait]
impl Tool for Status {
    type Input = StatusInput;
    type Plan = ();

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "admin.cluster.status",
            title: "Show the cluster",
            description: "Every switchboard node on this store (live or gone, its shards, its last heartbeat) and the gateway shard leases.",
            help: "An operator callable: the operator, or a token whose scope names it (admin.cluster.status, admin.*, *); an agent run never. A node is live when its last heartbeat is within one lease period (cluster.lease_s). Nodes not heard from for a day are forgotten.",
            mutating: false,
            primary: None,
            effects: Effects::LOCAL_READ,
            output_schema: Some(output_schema::<ClusterStatus>()),
            examples: vec![example(
                "List the nodes and leases",
                "tools admin.cluster.status",
                json!({}),
            )],
        }
    }

    fn plan(&self, _: &PlanContext<'_>, _: StatusInput) -> Result<Planned<()>, ToolError> {
        Ok(Planned::nowhere(()))
    }

    async fn run(&self, cx: &Invocation<'_>, (): ()) -> Result<ToolOutput, ToolError> {
        let Some(node) = cx.core.node() else {
            return Err(ToolError::not_found(
                ErrorCode::parse("cluster_unavailable"),
                "This server runs no gateway node (no Discord behind it), so it has no cluster to show; ask a `switchboard run`",
            ));
        };
        let status = switchboard_engine::cluster::status(node.as_ref(), crate::clock::now_ms())
            .await
            .map_err(|error| {
                ToolError::store_unavailable(format!(
                    "the cluster could not be read from the store: {error}; try again"
                ))
            })?;
        output(&status)
    }
}
