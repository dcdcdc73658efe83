//! The web console in a real browser (docs/console.md): Debian's chromium driven headless through
//! chromedriver. A runtime-driven run whose file write needs approval shows its card with the
//! argument summary; Approve in the page lets the call run, and the timeline shows it complete;
//! Deny with a reason keeps it from running, and the timeline shows the denial and the reason.
//! An `ask_user` question appears in the console, and an answer typed there reaches the model.
//! With authentication on, the console asks for a token: a reader sees the card without the
//! buttons, an agent's token approves and is named as who decided. Without a browser: with
//! authentication off, a re-bound host name and a cross-site decision are refused.
//!
//! chromium and chromedriver must be installed (`.ci/run` installs Debian's `chromium` and
//! `chromium-driver`); without them these tests fail and say so. With `TOOLPLANE_SCREENSHOTS=DIR`
//! (relative to the repository) they save the screenshots the docs show, at desktop and phone
//! widths.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use toolplane_proto::v1 as pb;
use toolplane_testkit::model_server::{ScriptedReply, spawn_model_server};

const DESKTOP: (u32, u32) = (1280, 900);
const PHONE: (u32, u32) = (390, 844);

/// A chromedriver on a free loopback port, stopped when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn installed(candidates: &[&str]) -> Option<PathBuf> {
    candidates.iter().map(PathBuf::from).find(|p| p.exists())
}

async fn driver() -> Driver {
    let missing = "the console's browser tests need Debian's `chromium` and `chromium-driver` \
                   (`apt-get install -y chromium chromium-driver`; .ci/run installs them)";
    let chromedriver = installed(&["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"])
        .unwrap_or_else(|| panic!("chromedriver is not installed: {missing}"));
    assert!(
        installed(&["/usr/bin/chromium"]).is_some(),
        "chromium is not installed: {missing}"
    );
    let port = toolplane_testkit::mcp_fixture::free_port().unwrap();
    let child = Command::new(chromedriver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "chromedriver did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    }
}

async fn browser(driver: &Driver) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--hide-scrollbars", format!("--window-size={},{}", DESKTOP.0, DESKTOP.1)]
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a headless chromium session")
}

/// Where screenshots go, when asked for.
fn screenshot_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("TOOLPLANE_SCREENSHOTS")?;
    let dir = PathBuf::from(dir);
    let dir = if dir.is_absolute() {
        dir
    } else {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(dir)
    };
    std::fs::create_dir_all(&dir).unwrap();
    Some(dir)
}

/// Saves the page at desktop and phone widths as `console-<name>-{desktop,phone}.png`.
async fn screenshots(c: &Client, name: &str) {
    let Some(dir) = screenshot_dir() else {
        return;
    };
    for (width, (w, h)) in [("desktop", DESKTOP), ("phone", PHONE)] {
        c.set_window_size(w, h).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let png = c.screenshot().await.unwrap();
        std::fs::write(dir.join(format!("console-{name}-{width}.png")), png).unwrap();
    }
    c.set_window_size(DESKTOP.0, DESKTOP.1).await.unwrap();
}

/// Clicks the first element matching `css` once it is there; a page refresh may replace it
/// between finding and clicking, so a stale element is looked up again.
async fn click(c: &Client, css: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(e) = c.find(Locator::Css(css)).await
            && e.click().await.is_ok()
        {
            return;
        }
        assert!(Instant::now() < deadline, "nothing to click at `{css}`");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until an element matching `css` contains `text`; returns its text.
async fn wait_text(c: &Client, css: &str, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for e in c.find_all(Locator::Css(css)).await.unwrap() {
            if let Ok(t) = e.text().await
                && t.contains(text)
            {
                return t;
            }
        }
        if Instant::now() > deadline {
            let page = c.source().await.unwrap_or_default();
            panic!("no `{css}` with {text:?} in the page:\n{page}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn spec(profile: &str, base_url: &str) -> pb::RunSpec {
    pb::RunSpec {
        profile_id: profile.into(),
        model: Some(pb::ModelEndpoint {
            kind: pb::ModelEndpointKind::OpenaiCompatible as i32,
            base_url: base_url.into(),
            model: "scripted".into(),
            ..Default::default()
        }),
        initial_user_message: "Write the answer and publish it.".into(),
        mode: pb::RunMode::Background as i32,
        chat: Some(pb::ChatBinding {
            chat_id: "chat-console".into(),
            message_id: None,
        }),
        max_rounds: 8,
        ..Default::default()
    }
}

fn commit_finish(from: usize) -> Vec<ScriptedReply> {
    vec![
        ScriptedReply::tool_calls(from, &[("workspace_commit", json!({}))]),
        ScriptedReply::tool_calls(
            from + 1,
            &[("workspace_finish", json!({"summary": "done"}))],
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_is_approved_in_the_browser_and_completes_in_the_timeline() {
    let driver = driver().await;
    let mut h = harness().await;
    h.put_profile(json!({
        "id": "writer",
        "tools": {"allow": ["builtin:workspace.*"], "approvalRequired": ["builtin:workspace.write_file"], "maxRounds": 8}
    }))
    .await;
    let mut script = vec![ScriptedReply::tool_calls(
        1,
        &[(
            "workspace_write_file",
            json!({"path": "output/main.md", "content": "The answer is 42."}),
        )],
    )];
    script.extend(commit_finish(2));
    let model = spawn_model_server(script).await.unwrap();
    let run = h.start_run(spec("writer", &model.base_url())).await;

    let c = browser(&driver).await;
    let console = format!("{}/console", h.plane.metrics_urls()[0]);
    c.goto(&console).await.unwrap();
    let row = wait_text(&c, "table.runs tbody tr", &run).await;
    assert!(row.contains("writer"), "{row}");
    screenshots(&c, "runs").await;

    c.goto(&format!("{console}#/run/{run}")).await.unwrap();
    let card = wait_text(&c, "[data-approval]", "workspace_write_file").await;
    assert!(
        card.contains("output/main.md"),
        "the argument summary: {card}"
    );
    assert!(card.contains("The answer is 42."), "{card}");
    wait_text(&c, "#timeline li", "waits for approval").await;
    assert_eq!(
        h.run(&run).await.status,
        pb::RunStatus::Running as i32,
        "the run waits for the decision"
    );
    screenshots(&c, "approval").await;

    click(&c, "button.approve").await;
    let done = wait_text(
        &c,
        "#timeline li[data-kind=tool_call_completed]",
        "workspace_write_file",
    )
    .await;
    assert!(done.contains("ok"), "{done}");
    wait_text(&c, "#timeline li[data-kind=run_completed]", "completed").await;
    screenshots(&c, "timeline").await;

    let finished = h.wait_terminal(&run).await;
    assert_eq!(finished.status, pb::RunStatus::Completed as i32);
    let journal = h.journal(&run).await;
    let approved: Vec<Value> = journal
        .iter()
        .filter(|e| e.r#type == "tool_call_approved")
        .map(payload)
        .collect();
    assert_eq!(approved.len(), 1, "{:?}", types(&journal));
    assert_eq!(approved[0]["alias"], "workspace_write_file");
    let written = journal
        .iter()
        .filter(|e| e.r#type == "tool_call_completed")
        .filter(|e| payload(e)["alias"] == "workspace_write_file")
        .count();
    assert_eq!(written, 1, "the approved call ran once");
    c.close().await.unwrap();
    h.plane.shutdown().await;
}

/// Deny with a reason in the page: the call never runs, and the timeline shows the denial with
/// the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_is_denied_in_the_browser_and_the_timeline_shows_the_denial() {
    let driver = driver().await;
    let mut h = harness().await;
    h.put_profile(json!({
        "id": "writer",
        "tools": {"allow": ["builtin:workspace.*"], "approvalRequired": ["builtin:workspace.write_file"], "maxRounds": 8}
    }))
    .await;
    let model = spawn_model_server(vec![ScriptedReply::tool_calls(
        1,
        &[(
            "workspace_write_file",
            json!({"path": "output/main.md", "content": "The answer is 41."}),
        )],
    )])
    .await
    .unwrap();
    let run = h.start_run(spec("writer", &model.base_url())).await;

    let c = browser(&driver).await;
    let console = format!("{}/console", h.plane.metrics_urls()[0]);
    c.goto(&format!("{console}#/run/{run}")).await.unwrap();
    wait_text(&c, "[data-approval]", "workspace_write_file").await;
    c.find(Locator::Css("[data-approval] input[name=reason]"))
        .await
        .unwrap()
        .send_keys("the answer is wrong")
        .await
        .unwrap();
    click(&c, "[data-approval] button.deny").await;
    let row = wait_text(
        &c,
        "#timeline li[data-kind=tool_call_denied]",
        "the answer is wrong",
    )
    .await;
    assert!(row.contains("denied"), "{row}");
    let journal = h.journal(&run).await;
    let denied: Vec<Value> = journal
        .iter()
        .filter(|e| e.r#type == "tool_call_denied")
        .map(payload)
        .collect();
    assert_eq!(denied.len(), 1, "{:?}", types(&journal));
    assert_eq!(denied[0]["reason"], "the answer is wrong");
    assert!(
        !journal
            .iter()
            .any(|e| e.r#type == "tool_call_started"
                && payload(e)["alias"] == "workspace_write_file"),
        "a denied call never runs"
    );
    c.close().await.unwrap();
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_in_the_browser_and_the_answer_reaches_the_model() {
    let driver = driver().await;
    let mut h = harness().await;
    h.put_profile(json!({
        "id": "asker",
        "tools": {"allow": ["builtin:workspace.*", "builtin:ask_user"], "maxRounds": 8}
    }))
    .await;
    let mut script = vec![
        ScriptedReply::tool_calls(
            1,
            &[(
                "ask_user",
                json!({"question": "Which colour should the report use?", "choices": ["red", "blue"]}),
            )],
        ),
        ScriptedReply::tool_calls(
            2,
            &[(
                "workspace_write_file",
                json!({"path": "output/main.md", "content": "teal"}),
            )],
        ),
    ];
    script.extend(commit_finish(3));
    let model = spawn_model_server(script).await.unwrap();
    let run = h.start_run(spec("asker", &model.base_url())).await;

    let c = browser(&driver).await;
    let console = format!("{}/console", h.plane.metrics_urls()[0]);
    c.goto(&format!("{console}#/approvals")).await.unwrap();
    let card = wait_text(&c, "[data-approval]", "Which colour should the report use?").await;
    assert!(
        card.contains("red") && card.contains("blue"),
        "the choices: {card}"
    );
    screenshots(&c, "question").await;

    let input = c
        .find(Locator::Css("[data-answer-form] input[name=answer]"))
        .await
        .unwrap();
    input.send_keys("teal, like the logo").await.unwrap();
    c.find(Locator::Css("[data-answer-form] button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();

    let finished = h.wait_terminal(&run).await;
    assert_eq!(
        finished.status,
        pb::RunStatus::Completed as i32,
        "{:?}",
        finished.failure
    );
    let requests = model.requests();
    let second = requests[1]["messages"].to_string();
    assert!(
        second.contains("teal, like the logo"),
        "the model's next request carries the answer: {second}"
    );
    c.goto(&format!("{console}#/run/{run}")).await.unwrap();
    wait_text(
        &c,
        "#timeline li[data-kind=question_answered]",
        "teal, like the logo",
    )
    .await;
    c.close().await.unwrap();
    h.plane.shutdown().await;
}

/// A token of `role` in the default cell: (its id, the principal a decision names; its secret).
async fn token(
    tokens: &toolplane_auth::TokenStore,
    role: toolplane_auth::Role,
) -> (String, String) {
    let created = tokens
        .create(toolplane_auth::NewToken {
            name: role.as_str().into(),
            cell: "default".into(),
            role,
            expires_at_unix_ms: None,
        })
        .await
        .unwrap();
    (created.info.id, created.secret.expose().to_owned())
}

/// Signs in on the console's token form.
async fn sign_in(c: &Client, secret: &str) {
    let field = c
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("#login-form input[name=token]"))
        .await
        .expect("the console asks for a token");
    field.send_keys(secret).await.unwrap();
    c.find(Locator::Css("#login-form button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_on_a_reader_sees_the_card_without_buttons_and_an_agent_decides() {
    use toolplane::plane::{Plane, PlaneConfig};
    use toolplane_auth::{Authenticator, Role};
    use toolplane_proto::v1::profile_service_client::ProfileServiceClient;
    use toolplane_proto::v1::runtime_service_client::RuntimeServiceClient;

    let driver = driver().await;
    let dir = tempfile::tempdir().unwrap();
    let tokens = toolplane_serve::auth::open_token_store(&dir.path().join("auth"))
        .await
        .unwrap();
    let (_, admin) = token(&tokens, Role::Admin).await;
    let (_, reader) = token(&tokens, Role::Reader).await;
    let (agent_id, agent) = token(&tokens, Role::Agent).await;
    let mut cfg = PlaneConfig::ephemeral(dir.path().join("plane"));
    cfg.auth = Authenticator::on(Some(tokens.clone()), None);
    let plane = Plane::up(cfg).await.unwrap();
    let bearer: tonic::metadata::MetadataValue<_> = format!("Bearer {admin}").parse().unwrap();
    let with_admin = move |mut req: tonic::Request<()>| -> Result<_, tonic::Status> {
        req.metadata_mut().insert("authorization", bearer.clone());
        Ok(req)
    };
    ProfileServiceClient::with_interceptor(channel(&plane.catalog_url()).await, with_admin.clone())
        .put_profile(pb::PutProfileRequest {
            profile_id: "writer".into(),
            profile_json: json!({
                "id": "writer",
                "tools": {"allow": ["builtin:workspace.*"], "approvalRequired": ["builtin:workspace.write_file"], "maxRounds": 8}
            })
            .to_string(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut script = vec![ScriptedReply::tool_calls(
        1,
        &[(
            "workspace_write_file",
            json!({"path": "output/main.md", "content": "signed in"}),
        )],
    )];
    script.extend(commit_finish(2));
    let model = spawn_model_server(script).await.unwrap();
    let mut runtime =
        RuntimeServiceClient::with_interceptor(channel(&plane.runtime_url()).await, with_admin);
    let run = runtime
        .start_run(pb::StartRunRequest {
            spec: Some(spec("writer", &model.base_url())),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap()
        .run_id;

    let c = browser(&driver).await;
    let console = format!("{}/console", plane.metrics_urls()[0]);
    c.goto(&format!("{console}#/run/{run}")).await.unwrap();
    sign_in(&c, &reader).await;
    let card = wait_text(&c, "[data-approval]", "workspace_write_file").await;
    assert!(card.contains("output/main.md"), "{card}");
    assert!(card.contains("can see this but not decide"), "{card}");
    assert!(
        c.find_all(Locator::Css("button.approve"))
            .await
            .unwrap()
            .is_empty(),
        "a reader gets no Approve button"
    );

    click(&c, "#signout").await;
    sign_in(&c, &agent).await;
    click(&c, "button.approve").await;
    let decided = wait_text(
        &c,
        "#timeline li[data-kind=tool_call_approved]",
        "approved by",
    )
    .await;
    assert!(
        decided.contains(&agent_id),
        "the agent's token decided: {decided}"
    );
    wait_text(&c, "#timeline li[data-kind=run_completed]", "completed").await;
    c.close().await.unwrap();
    plane.shutdown().await;
}

/// The status of one raw HTTP/1.1 request to `addr` (`http://host:port`).
async fn http_status(addr: &str, request: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr.trim_start_matches("http://"))
        .await
        .unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer.split(' ').nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_auth_the_console_refuses_rebound_hosts_and_cross_site_decisions() {
    let h = harness().await;
    let addr = h.plane.metrics_urls()[0].clone();
    let get = |host: &str| {
        format!("GET /console/runs HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n")
    };
    assert_eq!(http_status(&addr, &get("127.0.0.1")).await, 200);
    assert_eq!(http_status(&addr, &get("localhost:7411")).await, 200);
    assert_eq!(
        http_status(&addr, &get("rebound.example:7411")).await,
        403,
        "a re-bound name is refused"
    );
    let body = r#"{"approvalId":"nope","approve":true}"#;
    let post = |extra: &str, content_type: &str| {
        format!(
            "POST /console/decide HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: {content_type}\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    assert_eq!(
        http_status(&addr, &post("", "application/json")).await,
        404,
        "a same-origin decision reaches the runtime (no such approval)"
    );
    assert_eq!(
        http_status(
            &addr,
            &post("origin: http://evil.example\r\n", "application/json")
        )
        .await,
        400,
        "another site's page may not decide"
    );
    assert_eq!(
        http_status(&addr, &post("", "text/plain")).await,
        400,
        "a form-like body is refused"
    );
    h.plane.shutdown().await;
}
