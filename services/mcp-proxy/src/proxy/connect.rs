//! Keeping a registration's server connected: discovery into its cached catalog (`refresh`), the
//! connection a call uses, and the supervisor that reconnects with exponential backoff.

use super::*;

impl McpProxy {
    /// Re-discovers a server's tools.
    pub async fn refresh(
        &self,
        cell_id: &str,
        server_id: &str,
    ) -> Result<(ServerView, RefreshOutcome), ProxyError> {
        self.check_open()?;
        let cell = cell_or_default(cell_id)?;
        let id = parse_server_id(server_id)?;
        let server = self.server(&cell, &id)?;
        if server.registration().state == ServerState::Paused {
            return Err(ProxyError::new(
                MCP_SERVER_PAUSED,
                format!("server `{id}` is paused; activate it to refresh"),
            ));
        }
        let outcome = self.refresh_server(&server).await?;
        Ok((self.view(&server), outcome))
    }

    /// Lists every page of `tools/list` into a new catalog and stores it; on failure the old
    /// catalog stays.
    pub(crate) async fn refresh_server(
        &self,
        server: &Arc<Server>,
    ) -> Result<RefreshOutcome, ProxyError> {
        let _one = server.refresh.lock().await;
        let reg = server.registration();
        let limits = self.limits_of(&reg);
        let conn = self.connection(server, true).await?;
        server.live.listed(&conn);
        conn.raw_listing.begin();
        let mut builder =
            CatalogBuilder::new(&reg.server_id, limits.max_tools, limits.max_catalog_bytes);
        let discovery = async {
            let mut cursor: Option<String> = None;
            for _ in 0..MAX_PAGES {
                let params =
                    rmcp::model::PaginatedRequestParams::default().with_cursor(cursor.take());
                let page = conn.peer.list_tools(Some(params)).await?;
                for tool in &page.tools {
                    if let Ok(mut v) = serde_json::to_value(tool) {
                        conn.raw_listing.restore(&mut v);
                        builder.add(&v);
                    }
                    if builder.is_full() {
                        return Ok(());
                    }
                }
                match page.next_cursor {
                    Some(next) if !next.is_empty() => cursor = Some(next),
                    _ => return Ok(()),
                }
            }
            builder.pages_exhausted();
            Ok::<(), rmcp::ServiceError>(())
        };
        let listed = tokio::time::timeout(limits.call_timeout, discovery).await;
        let failure = match listed {
            Ok(Ok(())) => None,
            Ok(Err(e)) if !conn.is_alive() => Some(format!(
                "listing tools failed: {}; {}",
                crate::causes::service_error(&e),
                conn.death_reason()
            )),
            Ok(Err(e)) => Some(format!(
                "listing tools failed: {}",
                crate::causes::service_error(&e)
            )),
            Err(_) => Some(format!(
                "listing tools took longer than {} ms",
                limits.call_timeout.as_millis()
            )),
        };
        if let Some(why) = failure {
            let message = format!("server `{}` ({}): {why}", reg.display_name, reg.server_id);
            let status = lock(&server.health).status;
            server.set_health(status, Some(message.clone()));
            return Err(ProxyError::new(MCP_DISCOVERY_FAILED, message));
        }
        let catalog = builder
            .finish(now_ms())
            .versioned_after(server.cached().as_deref());
        let known = lock(&server.catalog_version).clone();
        let expected = match known {
            Some(v) => Some(v),
            None => {
                self.inner
                    .persist
                    .catalog_version(&reg.cell_id, &reg.server_id)
                    .await?
            }
        };
        if server.removed.is_cancelled() {
            return Err(ProxyError::new(
                MCP_SERVER_NOT_FOUND,
                format!("server `{}` was removed during discovery", reg.server_id),
            ));
        }
        let version = self
            .inner
            .persist
            .put_catalog(
                &reg.cell_id,
                &reg.server_id,
                catalog.stored(),
                expected.as_ref(),
            )
            .await?;
        let old: HashSet<String> = server
            .cached()
            .map(|c| c.tools().iter().map(|t| t.name.clone()).collect())
            .unwrap_or_default();
        let new: HashSet<String> = catalog.tools().iter().map(|t| t.name.clone()).collect();
        let id = |n: &str| format!("mcp/{}:{n}", reg.server_id);
        let outcome = RefreshOutcome {
            added: catalog
                .tools()
                .iter()
                .filter(|t| !old.contains(&t.name))
                .map(|t| id(&t.name))
                .collect(),
            removed: {
                let mut r: Vec<String> = old
                    .iter()
                    .filter(|n| !new.contains(n.as_str()))
                    .map(|n| id(n))
                    .collect();
                r.sort();
                r
            },
            warnings: catalog.warnings().to_vec(),
        };
        *lock(&server.catalog_version) = Some(version);
        *write(&server.catalog) = Some(Arc::new(catalog));
        tracing::info!(server_id = %reg.server_id, display_name = %reg.display_name, tools = new.len(), "mcp tools discovered");
        Ok(outcome)
    }

    /// A live connection, connecting if there is none. With `force`, a running reconnect backoff
    /// is ignored (an operator's refresh); calls respect it and fail fast instead.
    pub(crate) async fn connection(
        &self,
        server: &Arc<Server>,
        force: bool,
    ) -> Result<Arc<Connection>, ProxyError> {
        // The common case, a live connection nobody else is touching, without queueing on the
        // async lock.
        if let Ok(slot) = server.conn.try_lock()
            && let Some(conn) = slot.as_ref()
            && conn.is_alive()
        {
            return Ok(Arc::clone(conn));
        }
        let mut slot = server.conn.lock().await;
        if let Some(conn) = slot.as_ref() {
            if conn.is_alive() {
                return Ok(Arc::clone(conn));
            }
            let reason = conn.death_reason();
            if let Some(dead) = slot.take() {
                dead.close().await;
            }
            server.set_health(ConnStatus::Disconnected, Some(reason));
        }
        if server.removed.is_cancelled() || self.inner.shutdown.is_cancelled() {
            return Err(ProxyError::new(
                MCP_SHUTTING_DOWN,
                "the server or the proxy is shutting down",
            ));
        }
        if !force {
            let h = lock(&server.health);
            if let Some(at) = h.retry_at
                && at > Instant::now()
            {
                return Err(ProxyError::new(
                    MCP_CONNECTION_FAILED,
                    format!(
                        "reconnecting after {} failed attempts (next in {} ms): {}",
                        h.failures,
                        at.saturating_duration_since(Instant::now()).as_millis(),
                        h.last_error
                    ),
                ));
            }
        }
        let reg = server.registration();
        let limits = self.limits_of(&reg);
        server.set_health(ConnStatus::Connecting, None);
        let settings = &self.inner.settings;
        let egress = settings.egress.for_cell(&reg.cell_id);
        match connect(
            &reg,
            &limits,
            &settings.processes,
            &egress,
            server.live.hooks(),
        )
        .await
        {
            Ok(mut conn) => {
                server.live.number(&mut conn);
                let conn = Arc::new(conn);
                *slot = Some(Arc::clone(&conn));
                let mut h = lock(&server.health);
                h.status = ConnStatus::Connected;
                h.last_error.clear();
                h.failures = 0;
                h.retry_at = None;
                tracing::info!(server_id = %reg.server_id, display_name = %reg.display_name, server = %conn.server_info, "mcp server connected");
                Ok(conn)
            }
            Err(e) => {
                let mut h = lock(&server.health);
                h.status = ConnStatus::Failed;
                h.last_error = e.message.clone();
                h.failures = h.failures.saturating_add(1);
                h.retry_at = Some(Instant::now() + self.backoff(h.failures));
                tracing::warn!(server_id = %reg.server_id, error = %e, failures = h.failures, "mcp server connection failed");
                Err(e)
            }
        }
    }

    fn backoff(&self, failures: u32) -> Duration {
        let s = &self.inner.settings;
        let exp = failures.saturating_sub(1).min(20);
        Duration::from_millis(
            s.reconnect_initial_ms
                .saturating_mul(1u64 << exp)
                .min(s.reconnect_max_ms),
        )
    }

    /// Keeps an active server connected: connects at start, and after the connection dies waits
    /// out the backoff and reconnects. Every new connection is listed once, and again whenever
    /// the server sends `notifications/tools/list_changed` (`crate::live`).
    pub(crate) fn spawn_supervisor(&self, server: Arc<Server>) {
        let proxy = self.clone();
        tokio::spawn(async move {
            loop {
                if server.removed.is_cancelled() || proxy.inner.shutdown.is_cancelled() {
                    return;
                }
                let notified = server.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if server.registration().state == ServerState::Paused {
                    tokio::select! {
                        () = &mut notified => {}
                        () = server.removed.cancelled() => return,
                        () = proxy.inner.shutdown.cancelled() => return,
                    }
                    continue;
                }
                let current = server.conn.lock().await.clone();
                if let Some(conn) = current.filter(|c| c.is_alive()) {
                    // Every new connection is listed once: the server may have come back with
                    // other tools.
                    if server.live.unlisted(&conn) {
                        proxy.rediscover(&server, Trigger::Connected).await;
                        continue;
                    }
                    let list_changed = Arc::clone(server.live.list_changed());
                    tokio::select! {
                        // Removal and shutdown close the connection themselves: checked first, so
                        // a connection they closed is never reported as lost.
                        biased;
                        () = server.removed.cancelled() => return,
                        () = proxy.inner.shutdown.cancelled() => return,
                        () = conn.dead.cancelled() => {
                            // Pausing and re-registering take the connection out before they
                            // close it: only one still held died on its own.
                            let held = server
                                .conn
                                .lock()
                                .await
                                .as_ref()
                                .is_some_and(|c| Arc::ptr_eq(c, &conn));
                            if held {
                                let reason = conn.death_reason();
                                tracing::warn!(server_id = %server.registration().server_id, reason = %reason, "mcp server connection lost");
                                server.set_health(ConnStatus::Disconnected, Some(reason));
                            }
                        }
                        () = list_changed.notified() => {
                            proxy.rediscover(&server, Trigger::ListChanged).await;
                        }
                        () = &mut notified => {}
                    }
                    continue;
                }
                let wait = lock(&server.health)
                    .retry_at
                    .map(|at| at.saturating_duration_since(Instant::now()))
                    .unwrap_or_default();
                if !wait.is_zero() {
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = &mut notified => {}
                        () = server.removed.cancelled() => return,
                        () = proxy.inner.shutdown.cancelled() => return,
                    }
                    continue;
                }
                // A new connection is listed on the next turn of the loop.
                let _ = proxy.connection(&server, false).await;
            }
        });
    }
}
