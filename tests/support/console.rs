//! The operator console over HTTP, as its page speaks to it: a login with a token (the cookie
//! and CSRF token the page keeps), reads, and an approval decided.

use serde_json::{json, Value};

/// A console login: the session cookie and the CSRF token its writes carry.
pub struct ConsoleLogin {
    url: String,
    cookie: String,
    csrf: String,
}

impl ConsoleLogin {
    /// Logs in at `url` (the tool server's, serving the console) with `token`.
    pub fn new(url: &str, token: &str) -> ConsoleLogin {
        let url = url.trim_end_matches('/').to_owned();
        let mut answer = ureq::post(format!("{url}/console/api/login"))
            .header("origin", &url)
            .content_type("application/json")
            .send(json!({ "token": token }).to_string().as_bytes())
            .expect("the console takes the token");
        let cookie = answer
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .expect("a login cookie")
            .to_owned();
        let body: Value =
            serde_json::from_str(&answer.body_mut().read_to_string().expect("body")).expect("json");
        let csrf = body["csrf"].as_str().expect("a csrf token").to_owned();
        ConsoleLogin { url, cookie, csrf }
    }

    /// `GET /console/api/{path}`'s JSON.
    pub fn get(&self, path: &str) -> Value {
        let text = ureq::get(format!("{}/console/api/{path}", self.url))
            .header("cookie", &self.cookie)
            .call()
            .unwrap_or_else(|e| panic!("GET /console/api/{path}: {e}"))
            .body_mut()
            .read_to_string()
            .expect("body");
        serde_json::from_str(&text).expect("json")
    }

    /// The approvals waiting, as the Approvals view lists them.
    pub fn pending(&self) -> Vec<Value> {
        self.get("approvals")["approvals"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Approves approval `id`, as its button does.
    pub fn approve(&self, id: &str) {
        ureq::post(format!("{}/console/api/approvals/{id}", self.url))
            .header("cookie", &self.cookie)
            .header("x-switchboard-csrf", &self.csrf)
            .header("origin", &self.url)
            .content_type("application/json")
            .send(json!({ "approve": true }).to_string().as_bytes())
            .expect("the console approves");
    }
}
