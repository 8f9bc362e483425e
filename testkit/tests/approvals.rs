//! Approvals from outside, over HTTP with a second token: nobody decides an ask their own call
//! waits on, an approver sees the whole input whatever the audit settings, a caller reads only
//! its own pending asks whatever id it asks for, and a console login does only what its
//! token's scope names.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::console::{
    call_as, ci_asks_config, get, log_in, log_in_as, pending_cards, post, send_in_background,
    Answer, Login,
};
use serde_json::{json, Value};
use switchboard_engine::approvals::ApprovalCard;
use switchboard_testkit::platform::{RecordingPlatform, SurfaceCall};
use switchboard_testkit::testing::TestServer;

const CI: &str = "ci-secret-value";
const WATCH: &str = "watch-secret-value";
const LEAD: &str = "lead-secret-value";

async fn server(config: &str) -> TestServer {
    TestServer::start_with_tokens(
        config,
        Arc::new(RecordingPlatform::demo()),
        &[("ci", CI), ("watch", WATCH), ("lead", LEAD)],
    )
    .await
    .unwrap()
}

/// `[[toolserver.tokens]]` for `watch` (a console-only login that may send, and is asked
/// first) and `lead` (a console login that may decide and change scopes).
const MORE_TOKENS: &str = r#"
[[toolserver.tokens]]
name = "watch"
token_env = "WATCH_TOKEN"
scope = ["console", "surface.messages.send"]

[[toolserver.tokens]]
name = "lead"
token_env = "LEAD_TOKEN"
scope = ["console", "approvals.decide", "admin.tools.set"]
"#;

/// The `ci` token itself may log into the console and decide asks.
const CI_DECIDES: &str = r#"
[[toolserver.tokens]]
name = "watch"
token_env = "WATCH_TOKEN"
scope = ["console"]

[[toolserver.tokens]]
name = "lead"
token_env = "LEAD_TOKEN"
scope = ["console", "approvals.*", "surface.messages.send"]
"#;

/// The operator's own sends to #release-room are asked too.
const OPERATOR_ASKED: &str = r##"
[[permissions.rules]]
tool = "surface.messages.send"
session = "#release-room"
caller = "operator"
policy = "ask"
"##;

/// An agent whose every abort succeeds: what the console may not reach without the scope.
struct AbortsAnything;

impl switchboard_engine::runs::Runs for AbortsAnything {
    fn arrived(&self, _: &switchboard_engine::runs::Arrival<'_>) {}
    fn enqueue(&self, _: switchboard_engine::runs::Trigger) {}
    fn list(&self, _: Option<entity::Snowflake>) -> Vec<switchboard_engine::runs::RunView> {
        Vec::new()
    }
    fn abort(
        &self,
        _: switchboard_engine::runs::AbortTarget<'_>,
        _: entity::Snowflake,
        _: bool,
    ) -> switchboard_engine::runs::AbortOutcome {
        switchboard_engine::runs::AbortOutcome::Stopped {
            run_id: "run-1".into(),
            session_id: entity::Snowflake(1),
        }
    }
}

/// `login` decides the ask `id` in the console.
async fn decide(server: &TestServer, login: &Login, id: &str, approve: bool) -> Answer {
    post(
        server,
        &format!("/console/api/approvals/{id}"),
        login.change(server),
        json!({ "approve": approve }),
    )
    .await
}

fn is_hex_id(id: &str, prefix: &str, digits: usize) -> bool {
    id.strip_prefix(prefix)
        .is_some_and(|hex| hex.len() == digits && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[tokio::test]
async fn nobody_approves_the_ask_their_own_call_waits_on() {
    // `ci` may call, log into the console and decide: everything but its own asks.
    let config = ci_asks_config(
        CI_DECIDES,
        &format!("{OPERATOR_ASKED}\n[[permissions.rules]]\ntool = \"surface.messages.send\"\nsession = \"#release-room\"\ncaller = \"token:lead\"\npolicy = \"ask\"\n"),
    )
    .replace(
        "scope = [\"surface.*\"]",
        "scope = [\"surface.*\", \"console\", \"approvals.decide\"]",
    );
    let server = server(&config).await;
    let call = send_in_background(&server, CI, "ship it", None);
    let card = pending_cards(&server, 1).await.remove(0);
    assert_eq!(card.caller, "token:ci");
    assert_eq!(card.owner, "token:ci");

    // Its own console login, then the API: refused, and the ask still waits.
    let own = log_in_as(&server, CI).await;
    let listed = get(&server, "/console/api/approvals", own.read()).await;
    assert_eq!(listed.body["approvals"][0]["id"], card.id.as_str());
    let refused = decide(&server, &own, &card.id, true).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], "self_approval");
    let over_api = call_as(
        &server,
        CI,
        "approvals.decide",
        json!({"approvalId": card.id, "approve": true}),
    )
    .await;
    assert_eq!(over_api.status, 403, "{}", over_api.body);
    assert_eq!(over_api.body["error"]["code"], "self_approval");
    assert_eq!(
        server.core().approvals().pending().len(),
        1,
        "still waiting"
    );
    assert!(server.sends().is_empty(), "nothing posted");

    // The operator decides it; the record names who.
    let operator = log_in(&server).await;
    let decided = decide(&server, &operator, &card.id, true).await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    assert_eq!(decided.body["approval"]["by"], "console:operator");
    assert_eq!(call.await.unwrap().status, 200);
    let row = server
        .audit_rows()
        .into_iter()
        .find(|row| row.tool == "surface.messages.send" && row.caller == "token:ci")
        .expect("audited");
    assert_eq!(row.decided_by.as_deref(), Some("console:operator"));
    let refusals: Vec<_> = server
        .audit_rows()
        .into_iter()
        .filter(|row| {
            row.tool == "approvals.decide" && row.code.as_deref() == Some("self_approval")
        })
        .collect();
    assert_eq!(refusals.len(), 2, "each refused decision is audited");

    // The operator's own ask: not the operator's to decide; `ci`'s (a token with the scope).
    let call = send_in_background(&server, server.operator_token(), "mine", None);
    let card = pending_cards(&server, 1).await.remove(0);
    assert_eq!(card.owner, "operator");
    let refused = decide(&server, &operator, &card.id, true).await;
    assert_eq!(
        refused.body["error"]["code"], "self_approval",
        "{}",
        refused.body
    );
    let decided = decide(&server, &own, &card.id, false).await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    assert_eq!(decided.body["approval"]["by"], "console:token:ci");
    assert_eq!(call.await.unwrap().body["error"]["code"], "approval_denied");

    // A token that decides with a glob (`approvals.*`) is held to the same rule.
    let call = send_in_background(&server, LEAD, "lead's", None);
    let card = pending_cards(&server, 1).await.remove(0);
    let lead = call_as(
        &server,
        LEAD,
        "approvals.decide",
        json!({"approvalId": card.id, "approve": true}),
    )
    .await;
    assert_eq!(lead.body["error"]["code"], "self_approval", "{}", lead.body);
    call.abort();
}

#[tokio::test]
async fn self_approval_is_allowed_only_when_the_operator_opts_in() {
    let config = ci_asks_config("", "allow_self_approval = true\n").replace(
        "scope = [\"surface.*\"]",
        "scope = [\"surface.*\", \"console\", \"approvals.decide\"]",
    );
    let server = server(&config).await;
    let call = send_in_background(&server, CI, "ship it", None);
    let card = pending_cards(&server, 1).await.remove(0);
    let own = log_in_as(&server, CI).await;
    let decided = decide(&server, &own, &card.id, true).await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    assert_eq!(decided.body["approval"]["by"], "console:token:ci");
    assert_eq!(call.await.unwrap().status, 200);
}

#[tokio::test]
async fn an_approver_sees_the_whole_input_whatever_the_audit_settings() {
    let config = ci_asks_config("", "").replace(
        "[permissions]",
        "[audit]\ntext_chars = 200\nredact = true\n\n[permissions]",
    );
    let server = server(&config).await;
    let tail = "… @everyone rm -rf /";
    let text = format!("{}{tail}", "release notes ".repeat(88));
    assert!(text.chars().count() > 1_200);
    let call = send_in_background(&server, CI, &text, None);
    let card = pending_cards(&server, 1).await.remove(0);
    assert_eq!(
        card.preview,
        format!("sessionId: #release-room\ntext: {text}"),
        "the whole input, nothing cut"
    );
    // The same in every place an approver looks: the card posted, /v1/approvals, the console.
    let posted = server
        .surface()
        .calls()
        .into_iter()
        .find_map(|call| match call {
            SurfaceCall::PostApproval { card, .. } => Some(card),
            _ => None,
        })
        .expect("a card was posted");
    assert_eq!(posted.preview, card.preview);
    let listed = get(
        &server,
        "/v1/approvals",
        vec![(
            "authorization",
            format!("Bearer {}", server.operator_token()),
        )],
    )
    .await;
    assert_eq!(
        listed.body["approvals"][0]["preview"],
        card.preview.as_str()
    );
    let operator = log_in(&server).await;
    let shown = get(&server, "/console/api/approvals", operator.read()).await;
    assert!(shown.body["approvals"][0]["preview"]
        .as_str()
        .is_some_and(|p| p.ends_with(tail)));
    // Only the store keeps the log's copy: a hash under audit.redact, never the text.
    let kept = server.approvals_kept();
    assert!(!kept.is_empty());
    for record in &kept {
        let preview = record.card.preview.as_str();
        assert!(preview.contains("sha256"), "{preview}");
        assert!(!preview.contains("rm -rf"), "{preview}");
    }
    let decided = decide(&server, &operator, &card.id, true).await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    assert_eq!(call.await.unwrap().status, 200);
}

#[tokio::test]
async fn the_binding_covers_what_the_log_cuts() {
    let config = ci_asks_config("", "").replace(
        "[permissions]",
        "[audit]\ntext_chars = 200\n\n[permissions]",
    );
    let server = server(&config).await;
    let start = "x".repeat(300);
    let first = send_in_background(&server, CI, &format!("{start} fine"), None);
    let second = send_in_background(&server, CI, &format!("{start} @everyone rm -rf /"), None);
    let cards = pending_cards(&server, 2).await;
    assert_ne!(
        cards[0].binding, cards[1].binding,
        "two inputs the log cuts to the same text are bound apart"
    );
    for card in &cards {
        let input = json!({"sessionId": "#release-room", "text": card.preview.trim_start_matches("sessionId: #release-room\ntext: ")});
        let hash = switchboard_engine::approvals::binding(
            "surface.messages.send",
            &card.preview,
            &input,
            &[entity::Snowflake(demo_world::RELEASE_ROOM)],
            None,
        );
        assert_eq!(card.binding, hash[..12], "bound to the preview as shown");
    }
    first.abort();
    second.abort();
}

#[tokio::test]
async fn a_caller_sees_only_its_own_pending_approvals_whatever_id_it_asks_for() {
    let config = ci_asks_config(MORE_TOKENS, OPERATOR_ASKED);
    let server = server(&config).await;
    // The operator and `ci` both chose the call id `mcp-1`.
    let operators = send_in_background(
        &server,
        server.operator_token(),
        "operator's secret",
        Some("mcp-1"),
    );
    let cis = send_in_background(&server, CI, "ci's text", Some("mcp-1"));
    let cards = pending_cards(&server, 2).await;
    for card in &cards {
        assert!(is_hex_id(&card.id, "apr_", 32), "{}", card.id);
    }
    let as_token = |token: &str| vec![("authorization", format!("Bearer {token}"))];
    let shown = |answer: &Answer| -> Vec<String> {
        answer.body["approvals"]
            .as_array()
            .unwrap_or(&Vec::new())
            .iter()
            .map(|card| card["preview"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    for path in ["/v1/approvals?toolCallId=mcp-1", "/v1/approvals"] {
        let own = get(&server, path, as_token(CI)).await;
        assert_eq!(own.status, 200, "{}", own.body);
        assert_eq!(
            shown(&own),
            vec!["sessionId: #release-room\ntext: ci's text"],
            "{path}"
        );
        let other = get(&server, path, as_token(WATCH)).await;
        assert_eq!(other.status, 200, "{}", other.body);
        assert!(shown(&other).is_empty(), "{path}: {}", other.body);
        let all = get(&server, path, as_token(server.operator_token())).await;
        assert_eq!(shown(&all).len(), 2, "{path}: the operator sees all");
    }
    // A capability minted for a run reads only its own too.
    let run = server.mint(demo_world::OPS, "run-1", &["*"], Duration::from_secs(60));
    let theirs = get(&server, "/v1/approvals?toolCallId=mcp-1", as_token(&run)).await;
    assert!(shown(&theirs).is_empty(), "{}", theirs.body);
    operators.abort();
    cis.abort();
}

#[tokio::test]
async fn a_console_only_login_reads_but_decides_and_changes_nothing() {
    let config = ci_asks_config(
        MORE_TOKENS,
        "[[permissions.rules]]\ntool = \"surface.messages.send\"\nsession = \"#release-room\"\ncaller = \"token:watch\"\npolicy = \"ask\"\n",
    );
    let server = server(&config).await;
    let ci_call = send_in_background(&server, CI, "ci's", None);
    pending_cards(&server, 1).await;
    let watch_call = send_in_background(&server, WATCH, "watch's", None);
    let cards = pending_cards(&server, 2).await;
    let card_of = |caller: &str| -> ApprovalCard {
        cards
            .iter()
            .find(|card| card.caller == caller)
            .cloned()
            .expect("a card")
    };
    let watch = log_in_as(&server, WATCH).await;
    let ops = demo_world::OPS;

    // It reads: sessions, messages, the audit log, its own pending ask.
    for path in [
        "/console/api/sessions".to_owned(),
        format!("/console/api/sessions/{ops}/messages"),
        "/console/api/audit".to_owned(),
    ] {
        let read = get(&server, &path, watch.read()).await;
        assert_eq!(read.status, 200, "{path}: {}", read.body);
    }
    let me = get(&server, "/console/api/me", watch.read()).await;
    assert_eq!(me.body["mayDecide"], false, "{}", me.body);
    assert_eq!(me.body["mayChangeScopes"], false);
    let listed = get(&server, "/console/api/approvals", watch.read()).await;
    let ids: Vec<&str> = listed.body["approvals"]
        .as_array()
        .expect("approvals")
        .iter()
        .filter_map(|card| card["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        vec![card_of("token:watch").id.as_str()],
        "only its own"
    );
    // The login did not widen the token: over the API it still sends, and nothing else.
    let api = call_as(&server, WATCH, "surface.sessions.list", json!({})).await;
    assert_eq!(api.body["error"]["code"], "out_of_scope", "{}", api.body);

    // It neither decides another's ask nor changes a scope nor stops a run.
    let ci_card = card_of("token:ci");
    let refused = decide(&server, &watch, &ci_card.id, true).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], "out_of_scope");
    let widened = post(
        &server,
        &format!("/console/api/sessions/{ops}/scope"),
        watch.change(&server),
        json!({"action": "set", "tools": "all"}),
    )
    .await;
    assert_eq!(widened.status, 403, "{}", widened.body);
    assert!(server.scopes_kept().is_empty(), "no scope changed");
    assert!(server.core().set_runs(Arc::new(AbortsAnything)));
    let abort = post(
        &server,
        &format!("/console/api/runs/{ops}/abort"),
        watch.change(&server),
        json!({}),
    )
    .await;
    assert_eq!(abort.status, 403, "{}", abort.body);
    assert_eq!(server.core().approvals().pending().len(), 2);

    // A run's capability never gets them, not even with every callable in its scope.
    let run = server.mint(ops, "run-1", &["*"], Duration::from_secs(60));
    for (tool, input) in [
        (
            "approvals.decide",
            json!({"approvalId": ci_card.id, "approve": true}),
        ),
        (
            "admin.tools.set",
            json!({"sessionId": "#ops", "action": "reset"}),
        ),
    ] {
        let answer = call_as(&server, &run, tool, input).await;
        assert_eq!(
            answer.body["error"]["code"], "out_of_scope",
            "{tool}: {}",
            answer.body
        );
    }
    let listed: Value = get(
        &server,
        "/v1/tools",
        vec![("authorization", format!("Bearer {run}"))],
    )
    .await
    .body;
    assert!(
        !listed.to_string().contains("approvals.decide")
            && !listed.to_string().contains("admin.tools.set"),
        "{listed}"
    );

    // A login whose scope names them decides another's ask and changes a scope.
    let lead = log_in_as(&server, LEAD).await;
    let me = get(&server, "/console/api/me", lead.read()).await;
    assert_eq!(me.body["mayDecide"], true, "{}", me.body);
    let all = get(&server, "/console/api/approvals", lead.read()).await;
    assert_eq!(all.body["approvals"].as_array().map(Vec::len), Some(2));
    let decided = decide(&server, &lead, &ci_card.id, true).await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    assert_eq!(decided.body["approval"]["by"], "console:token:lead");
    assert_eq!(ci_call.await.unwrap().status, 200);
    let changed = post(
        &server,
        &format!("/console/api/sessions/{ops}/scope"),
        lead.change(&server),
        json!({"action": "disable", "tools": "surface.messages.send"}),
    )
    .await;
    assert_eq!(changed.status, 200, "{}", changed.body);
    let row = server
        .audit_rows()
        .into_iter()
        .find(|row| row.tool == "admin.tools.set" && row.outcome == "ok")
        .expect("audited as a call");
    assert_eq!(row.caller, "token:lead");
    watch_call.abort();
}
