//! Connections' identities, their SASL exchanges, and the authorizer's
//! questions (`crate::security`).

use std::collections::BTreeSet;

use base64::Engine;
use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use sha2::{Digest, Sha256};

use super::Core;
use crate::boundary::Output;
use crate::io::ConnId;
use crate::limits;
use crate::request::RequestCtx;
use crate::security::acl::{resource, Op};
use crate::security::sasl::Step;
use crate::security::store::SecurityStore;
use crate::security::{Listener, ANONYMOUS};

impl Core {
    pub(crate) fn handle_connected(
        &mut self,
        conn: ConnId,
        client_host: String,
        listener: Listener,
    ) {
        let sasl = listener.protocol.is_sasl();
        if sasl && self.sasl_deadlines.len() >= limits::UNAUTHENTICATED_CONNECTIONS_MAX {
            tracing::warn!(conn, %client_host, "too many unauthenticated connections; closing");
            self.conns.entry(conn).or_default();
            return self.close(conn);
        }
        let state = self.conns.entry(conn).or_default();
        state.client_host = client_host;
        if sasl {
            let deadline_ms = self.now_ms + limits::SASL_AUTHENTICATION_TIMEOUT_MS;
            state.auth_deadline_ms = Some(deadline_ms);
            self.sasl_deadlines.insert((deadline_ms, conn));
        } else {
            state.principal = Some(
                listener
                    .tls_principal
                    .clone()
                    .unwrap_or_else(|| ANONYMOUS.to_string()),
            );
        }
        state.listener = listener;
    }

    /// Closes the connections that did not authenticate in time.
    pub(super) fn sasl_tick(&mut self) {
        while let Some(&(deadline_ms, conn)) = self.sasl_deadlines.first() {
            if deadline_ms > self.now_ms {
                return;
            }
            self.sasl_deadlines.pop_first();
            tracing::info!(conn, "no SASL authentication in time; closing");
            self.close(conn);
        }
    }

    /// `conn` is gone or authenticated: no deadline for it any more.
    pub(super) fn forget_sasl_deadline(&mut self, conn: ConnId) {
        let deadline = self
            .conns
            .get_mut(&conn)
            .and_then(|c| c.auth_deadline_ms.take());
        if let Some(deadline_ms) = deadline {
            self.sasl_deadlines.remove(&(deadline_ms, conn));
        }
    }

    /// Whether `conn` may send a request of `api_key` now: on a SASL
    /// listener nothing but ApiVersions and the SASL requests before it
    /// has authenticated (Kafka's SaslServerAuthenticator closes the
    /// connection on anything else).
    pub(crate) fn sasl_allows(&self, conn: ConnId, api_key: ApiKey) -> bool {
        let Some(c) = self.conns.get(&conn) else {
            return true;
        };
        !c.listener.protocol.is_sasl()
            || c.sasl.is_done()
            || matches!(
                api_key,
                ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
            )
    }

    /// Whether `conn`'s frames are bare SASL tokens (after SaslHandshake v0).
    pub(crate) fn sasl_unframed(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_some_and(|c| c.sasl.unframed())
    }

    /// A bare token of the unframed flow: the reply goes back bare; a
    /// failure closes the connection (there is no error field to carry).
    pub(crate) fn handle_sasl_token(&mut self, conn: ConnId, token: Bytes) {
        match self.sasl_authenticate(conn, &token) {
            Step::Continue(reply) | Step::Done { token: reply, .. } => {
                self.outbox.push(Output::Response {
                    conn,
                    frame: Bytes::from(reply),
                });
            }
            Step::Failed(_) => self.close(conn),
        }
    }

    /// The SASL mechanisms this broker accepts (`sasl.enabled.mechanisms`).
    pub(crate) fn sasl_enabled_mechanisms(&self) -> &[String] {
        &self.config.sasl_enabled_mechanisms
    }

    /// Whether `conn` has completed SASL authentication.
    pub(crate) fn sasl_done(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_some_and(|c| c.sasl.is_done())
    }

    /// The mechanism `conn`'s handshake chose, by name ("" if none).
    pub(crate) fn sasl_mechanism(&self, conn: ConnId) -> String {
        self.conns
            .get(&conn)
            .and_then(|c| c.sasl.mechanism())
            .unwrap_or_default()
    }

    /// Whether `conn` came in on a SASL listener.
    pub(crate) fn on_sasl_listener(&self, conn: ConnId) -> bool {
        self.conns
            .get(&conn)
            .is_some_and(|c| c.listener.protocol.is_sasl())
    }

    /// SaslHandshake: Ok, or its error code.
    pub(crate) fn sasl_handshake(
        &mut self,
        conn: ConnId,
        mechanism: &str,
        version: i16,
    ) -> Result<(), i16> {
        let enabled = self.config.sasl_enabled_mechanisms.clone();
        let c = self.conns.entry(conn).or_default();
        if !c.listener.protocol.is_sasl() {
            return Err(34); // ILLEGAL_SASL_STATE: no SASL on this listener
        }
        c.sasl.handshake(mechanism, &enabled, version)
    }

    /// One SaslAuthenticate token; on success the connection has its principal.
    pub(crate) fn sasl_authenticate(&mut self, conn: ConnId, token: &[u8]) -> Step {
        if token.len() > limits::SASL_TOKEN_BYTES_MAX {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.sasl = crate::security::sasl::SaslState::Failed;
            }
            return Step::Failed(format!("a token of {} bytes", token.len()));
        }
        let nonce = self.next_nonce();
        let c = self.conns.entry(conn).or_default();
        let step = c.sasl.authenticate(token, &self.security, || nonce);
        match &step {
            Step::Done { principal, .. } => {
                tracing::info!(conn, %principal, "SASL authentication succeeded");
                c.principal = Some(principal.clone());
                if let Some(deadline_ms) = c.auth_deadline_ms.take() {
                    self.sasl_deadlines.remove(&(deadline_ms, conn));
                }
                self.outbox.push(Output::Authenticated { conn });
            }
            Step::Failed(why) => {
                tracing::warn!(conn, host = %c.client_host, "SASL authentication failed: {why}");
            }
            Step::Continue(_) => {}
        }
        step
    }

    /// The server's part of a SCRAM nonce: base64 of SHA-256 over the
    /// driver's entropy and a counter (unguessable without the entropy,
    /// never repeated).
    fn next_nonce(&mut self) -> String {
        self.nonces_made += 1;
        let mut h = Sha256::new();
        h.update(self.entropy);
        h.update(self.nonces_made.to_be_bytes());
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(h.finalize())
    }

    /// Where a client on `conn` is told to connect (Metadata,
    /// FindCoordinator, DescribeCluster): the advertised address of the
    /// listener it came in on, as Kafka answers each listener with its own.
    pub(crate) fn advertised_address(&self, conn: ConnId) -> (String, i32) {
        let name = self.conns.get(&conn).map(|c| c.listener.name.as_str());
        self.config
            .advertised_listeners
            .iter()
            .find(|(listener, _, _)| Some(listener.as_str()) == name)
            .map(|(_, host, port)| (host.clone(), *port))
            .unwrap_or_else(|| {
                (
                    self.config.advertised_host.clone(),
                    self.config.advertised_port,
                )
            })
    }

    /// Who `conn` is (`User:ANONYMOUS` until it says).
    pub(crate) fn principal(&self, conn: ConnId) -> String {
        self.conns
            .get(&conn)
            .and_then(|c| c.principal.clone())
            .unwrap_or_else(|| ANONYMOUS.to_string())
    }

    pub(crate) fn security(&self) -> &SecurityStore {
        &self.security
    }

    /// For a handler whose meta.db write of credentials or ACLs completed.
    pub(crate) fn security_mut(&mut self) -> &mut SecurityStore {
        &mut self.security
    }

    /// Why an ACL request (CreateAcls, DeleteAcls, DescribeAcls) is refused
    /// before it is looked at: no authorizer (SECURITY_DISABLED, as Kafka
    /// without one answers), or `op` on the cluster not allowed.
    pub(crate) fn acl_admin_refusal(
        &self,
        ctx: &RequestCtx,
        op: Op,
    ) -> Option<(kafka_protocol::ResponseError, &'static str)> {
        use kafka_protocol::ResponseError;
        if !self.authorizer_enabled() {
            Some((
                ResponseError::SecurityDisabled,
                "No Authorizer is configured.",
            ))
        } else if !self.authorized(
            ctx,
            op,
            crate::security::acl::resource::CLUSTER,
            "kafka-cluster",
        ) {
            Some((
                ResponseError::ClusterAuthorizationFailed,
                "Cluster authorization failed.",
            ))
        } else {
            None
        }
    }

    pub(crate) fn authorizer_enabled(&self) -> bool {
        self.config.authorizer.enabled
    }

    /// Whether the request's principal may do `op` on the resource.
    pub(crate) fn authorized(
        &self,
        ctx: &RequestCtx,
        op: Op,
        resource_type: i8,
        name: &str,
    ) -> bool {
        if !self.config.authorizer.enabled {
            return true;
        }
        if self.internal_read(ctx.conn, op, resource_type) {
            return true;
        }
        let principal = self.principal(ctx.conn);
        let host = self.client_address(ctx.conn);
        let allowed = self.security.acls.authorize(
            &self.config.authorizer,
            &principal,
            &host,
            op,
            resource_type,
            name,
        );
        if !allowed {
            // Debug, not info: Metadata and the list APIs ask for every
            // topic or group they might show, on every refresh.
            tracing::debug!(%principal, %host, ?op, resource_type, name, api = ?ctx.api_key, "denied");
        }
        allowed
    }

    /// Whether `conn` is the broker's own in-process connection (the
    /// console's) asking to look, not to change: DESCRIBE or
    /// DESCRIBE_CONFIGS of anything, READ of a topic. Not READ of a group,
    /// which would let it join one or commit its offsets.
    fn internal_read(&self, conn: ConnId, op: Op, resource_type: i8) -> bool {
        let internal = self.conns.get(&conn).is_some_and(|c| c.listener.internal);
        let looks = match op {
            Op::Describe | Op::DescribeConfigs => true,
            Op::Read => resource_type == resource::TOPIC,
            _ => false,
        };
        internal && looks
    }

    /// Whether the request's principal may do `op` on some resource of the
    /// type (Kafka's authorizeByResourceType, simplified: see
    /// `Acls::authorize_by_resource_type`).
    pub(crate) fn authorized_by_resource_type(
        &self,
        ctx: &RequestCtx,
        op: Op,
        resource_type: i8,
    ) -> bool {
        if !self.config.authorizer.enabled {
            return true;
        }
        let principal = self.principal(ctx.conn);
        let host = self.client_address(ctx.conn);
        let allowed = self.security.acls.authorize_by_resource_type(
            &self.config.authorizer,
            &principal,
            &host,
            op,
            resource_type,
        );
        if !allowed {
            tracing::info!(%principal, %host, ?op, resource_type, api = ?ctx.api_key, "denied on every resource of the type");
        }
        allowed
    }

    /// The topics among `names` the request's principal may not do `op` on
    /// (those a request answers TOPIC_AUTHORIZATION_FAILED).
    pub(crate) fn unauthorized_topics<'a>(
        &self,
        ctx: &RequestCtx,
        op: Op,
        names: impl IntoIterator<Item = &'a str>,
    ) -> BTreeSet<String> {
        names
            .into_iter()
            .filter(|name| !self.authorized(ctx, op, resource::TOPIC, name))
            .map(str::to_string)
            .collect()
    }

    /// The client's address as ACLs name hosts (without the driver's `/`).
    fn client_address(&self, conn: ConnId) -> String {
        self.conns
            .get(&conn)
            .map(|c| c.client_host.trim_start_matches('/').to_string())
            .unwrap_or_default()
    }
}
