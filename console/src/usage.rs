//! The console's usage panel (issue 26 §4): `GET /console/api/usage.svg`, a daily chart of the
//! last 30 days' tokens and cost drawn on the server as SVG from `usage.report` (called as
//! the logged-in caller, so a login whose scope does not name it gets the refusal), shown by
//! the page as an image: no script, no library, nothing fetched from elsewhere.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::fmt::Write as _;

use super::{call, Operator, Shared};
use switchboard_front::ApiError;

/// Chart size (presentation attributes only: the console's CSP allows no inline style).
const WIDTH: u32 = 720;
const HEIGHT: u32 = 220;
const PAD: u32 = 30;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The chart of `rows` (`usage.report`'s, by day, oldest first) as an SVG document.
pub(crate) fn chart(rows: &[Value]) -> String {
    let days: Vec<(String, u64, f64)> = rows
        .iter()
        .map(|row| {
            (
                row["day"].as_str().unwrap_or("?").to_owned(),
                row["totalTokens"].as_u64().unwrap_or(0),
                row["usd"].as_f64().unwrap_or(0.0),
            )
        })
        .collect();
    let max = days.iter().map(|d| d.1).max().unwrap_or(0).max(1);
    let total_tokens: u64 = days.iter().map(|d| d.1).sum();
    let total_usd: f64 = days.iter().map(|d| d.2).sum();
    let mut svg = String::new();
    let title = format!("Model usage by day, last 30 days: {total_tokens} tokens, ${total_usd:.2}");
    let _ = write!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{t}"><title>{t}</title><g font-family="sans-serif" font-size="11" fill="#555">"##,
        t = escape(&title)
    );
    let _ = write!(svg, r#"<text x="{PAD}" y="16">{}</text>"#, escape(&title));
    if days.is_empty() {
        let _ = write!(
            svg,
            r#"<text x="{PAD}" y="{}">No model usage recorded in the last 30 days.</text>"#,
            HEIGHT / 2
        );
    }
    let plot = HEIGHT - 2 * PAD;
    let slot = (WIDTH - 2 * PAD) / u32::try_from(days.len().max(1)).unwrap_or(1);
    for (index, (day, tokens, usd)) in days.iter().enumerate() {
        let height = u32::try_from(u128::from(*tokens) * u128::from(plot) / u128::from(max))
            .unwrap_or(plot)
            .max(1);
        let x = PAD + slot * u32::try_from(index).unwrap_or(0);
        let y = HEIGHT - PAD - height;
        let _ = write!(
            svg,
            r##"<rect x="{x}" y="{y}" width="{}" height="{height}" fill="#4a7bd0"><title>{}: {tokens} tokens, ${usd:.4}</title></rect>"##,
            slot.saturating_sub(2).max(1),
            escape(day)
        );
        // Label the first, the last and a few between.
        if index == 0 || index + 1 == days.len() || index % 7 == 0 {
            let _ = write!(
                svg,
                r#"<text x="{x}" y="{}">{}</text>"#,
                HEIGHT - PAD + 14,
                escape(day.get(5..).unwrap_or(day))
            );
        }
    }
    svg.push_str("</g></svg>");
    svg
}

/// `GET /console/api/usage.svg`.
pub(crate) async fn usage_svg(
    State(core): Shared,
    operator: Operator,
) -> Result<Response, ApiError> {
    let report = call(
        &core,
        &operator,
        "usage.report",
        json!({"by": "day", "since": "30d"}),
    )
    .await?;
    let rows = report["rows"].as_array().cloned().unwrap_or_default();
    Ok((
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        chart(&rows),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_draws_one_bar_per_day_and_escapes_what_it_shows() {
        let rows = vec![
            json!({"day": "2026-11-25", "totalTokens": 100, "usd": 0.5}),
            json!({"day": "2026-11-26<", "totalTokens": 50, "usd": 0.25}),
        ];
        let svg = chart(&rows);
        assert_eq!(svg.matches("<rect").count(), 2);
        assert!(svg.contains("150 tokens, $0.75"));
        assert!(svg.contains("2026-11-26&lt;"));
        assert!(!svg.contains("26<:"));
        assert!(chart(&[]).contains("No model usage"));
    }
}
