//! What SIGHUP changes in a running node: the token table (and with it the digest every
//! member must share) and the TLS files; and the end of streams whose token a reload revoked.

use std::sync::Arc;

use anyhow::Context;

use super::Node;

impl Node {
    /// The token table in force.
    pub fn auth(&self) -> Arc<crate::auth::Auth> {
        self.auth.borrow().clone()
    }

    /// SIGHUP: loads the token file and the TLS files again. Each that does not load stays as
    /// it was; the errors say which.
    pub fn reload(&self) -> anyhow::Result<()> {
        let auth = if self.config.token_file.is_some() {
            self.reload_auth()
                .context("the token file was not reloaded")
        } else {
            Ok(())
        };
        let tls = match &self.tls {
            Some(tls) => tls
                .reload()
                .map(|()| {
                    self.peers.set_tls(tls.peer_client());
                    tracing::info!("reloaded the TLS certificate, key and CA");
                })
                .context("the TLS files were not reloaded"),
            None => Ok(()),
        };
        match (auth, tls) {
            (Err(a), Err(t)) => Err(a.context(format!("{t:#}"))),
            (Err(e), _) | (_, Err(e)) => Err(e),
            (Ok(()), Ok(())) => Ok(()),
        }
    }

    /// Loads the token file again (SIGHUP): a token no longer in it is refused from its next
    /// call on, and the streams it opened end ([`Node::revoked`]). A file that does not load
    /// leaves the table in force as it was. Auth cannot be turned on or off this way.
    pub fn reload_auth(&self) -> anyhow::Result<()> {
        let Some(path) = &self.config.token_file else {
            anyhow::bail!("no --token-file to reload: auth stays off");
        };
        let auth = crate::auth::Auth::load(path, self.config.insecure)?;
        anyhow::ensure!(
            auth.peer_token() == self.auth().peer_token(),
            "the peer token this node sends (the lexically first `peer` line) would change: \
             that takes a restart; a reload may add or remove any other token"
        );
        let digest = crate::agreement::digest(
            &auth,
            self.config.require_registration,
            self.config.ad_hoc_bookable,
        );
        self.peers.identify(self.id, &digest);
        *self
            .config_digest
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = digest.clone();
        self.auth.send_replace(Arc::new(auth));
        tracing::info!(file = %path.display(), config_digest = %digest, "reloaded the token file");
        Ok(())
    }

    /// The digest of what every member must share (`crate::agreement`).
    pub fn config_digest(&self) -> String {
        self.config_digest
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Resolves once a reload revoked `credential` (never when auth is off).
    pub async fn revoked(&self, credential: Option<crate::auth::Credential>) {
        let Some(credential) = credential else {
            return std::future::pending().await;
        };
        let mut changes = self.auth.subscribe();
        loop {
            if !changes.borrow_and_update().admits(&credential) {
                return;
            }
            if changes.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
}
