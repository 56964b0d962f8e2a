//! TLS to PostgreSQL, asked for the libpq way in `database.url`: `sslmode` and `sslrootcert`.
//!
//! diesel-async connects without TLS, so a URL that asks for it is connected here, through the
//! tokio-postgres diesel-async runs on, with rustls and its aws-lc-rs provider (what reqwest,
//! lapin and redis already use), and then handed to diesel-async. A URL without `sslmode`, or
//! with `disable` or `allow`, keeps diesel-async's own plain connection.
//!
//! | `sslmode`     | TLS                      | certificate chain checked       | host name checked |
//! |---------------|--------------------------|---------------------------------|-------------------|
//! | `prefer`      | if the server offers it  | only with `sslrootcert`         | no                |
//! | `require`     | yes                      | only with `sslrootcert`         | no                |
//! | `verify-ca`   | yes                      | yes                             | no                |
//! | `verify-full` | yes                      | yes                             | yes               |
//!
//! The roots are the system's (or `SSL_CERT_FILE`), or only the PEM file `sslrootcert` names.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use diesel::ConnectionError;
use diesel::result::ConnectionResult;
use diesel_async::{AsyncConnection, AsyncPgConnection};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, InvalidDnsNameError, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::SslMode;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

/// A `database.url` read once: what tokio-postgres is given and how the connection is secured.
#[derive(Clone)]
pub struct PgTarget {
    /// The URL without `sslmode` and `sslrootcert`: tokio-postgres knows neither `verify-*` nor
    /// `sslrootcert`, and is told the mode directly.
    url: String,
    tls: Option<Tls>,
}

#[derive(Clone)]
struct Tls {
    mode: SslMode,
    config: Arc<ClientConfig>,
}

/// What the server's certificate is checked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    Nothing,
    Chain,
    ChainAndName,
}

impl PgTarget {
    /// Reads `sslmode` and `sslrootcert`, and the root certificates when they are needed, so a
    /// wrong mode or an unreadable CA file stops the service at start, not at its first query.
    pub fn parse(url: &str) -> ConnectionResult<Self> {
        Self::read(url).map_err(ConnectionError::InvalidConnectionUrl)
    }

    fn read(url: &str) -> Result<Self, String> {
        let plain = |url: String| Ok(Self { url, tls: None });
        let Some((base, query)) = url.split_once('?') else {
            return plain(url.to_owned());
        };
        let (mut mode, mut root) = (None, None);
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=').unwrap_or((pair, "")) {
                ("sslmode", value) => mode = Some(decode(value)?),
                ("sslrootcert", value) => root = Some(decode(value)?),
                _ => kept.push(pair),
            }
        }
        let url = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
        // libpq checks the chain in `prefer` and `require` too once a root file is named.
        let named_roots = if root.is_some() { Check::Chain } else { Check::Nothing };
        let (mode, check) = match mode.as_deref() {
            None if root.is_some() => {
                return Err("sslrootcert is set without sslmode: add sslmode=verify-full".into());
            }
            None | Some("disable" | "allow") => return plain(url),
            Some("prefer") => (SslMode::Prefer, named_roots),
            Some("require") => (SslMode::Require, named_roots),
            Some("verify-ca") => (SslMode::Require, Check::Chain),
            Some("verify-full") => (SslMode::Require, Check::ChainAndName),
            Some(other) => {
                return Err(format!(
                    "sslmode={other}: expected disable, prefer, require, verify-ca or verify-full"
                ));
            }
        };
        let config = client_config(check, root.as_deref())?;
        Ok(Self { url, tls: Some(Tls { mode, config: Arc::new(config) }) })
    }

    /// True when the connection is made through rustls (`prefer` and up).
    pub fn tls(&self) -> bool {
        self.tls.is_some()
    }

    /// A new connection: diesel-async's own when plain; otherwise tokio-postgres over rustls,
    /// driven by diesel-async as its own would be.
    pub async fn connect(&self) -> ConnectionResult<AsyncPgConnection> {
        let Some(tls) = &self.tls else {
            return AsyncPgConnection::establish(&self.url).await;
        };
        let mut config: tokio_postgres::Config =
            self.url.parse().map_err(|e| ConnectionError::InvalidConnectionUrl(chain(&e)))?;
        config.ssl_mode(tls.mode);
        let (client, connection) = config
            .connect(MakeRustls(tls.config.clone()))
            .await
            .map_err(|e| ConnectionError::BadConnection(chain(&e)))?;
        AsyncPgConnection::try_from_client_and_connection(client, connection).await
    }
}

/// An error with its causes: tokio-postgres shows "error performing TLS handshake" alone and
/// keeps the reason (an unknown issuer, a name mismatch) in its source.
fn chain(e: &dyn std::error::Error) -> String {
    let mut shown = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        shown.push_str(": ");
        shown.push_str(&c.to_string());
        cause = c.source();
    }
    shown
}

/// `%2F` and the like in a URL's query value (a CA file's path).
fn decode(value: &str) -> Result<String, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let byte = value
                .get(i + 1..i + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or_else(|| format!("bad percent-encoding in `{value}`"))?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("`{value}` is not UTF-8"))
}

fn client_config(check: Check, root: Option<&str>) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let verifier: Arc<dyn ServerCertVerifier> = match check {
        Check::Nothing => Arc::new(Relaxed { chain: None, provider }),
        Check::Chain | Check::ChainAndName => {
            let webpki =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots(root)?), provider.clone())
                    .build()
                    .map_err(|e| e.to_string())?;
            if check == Check::Chain { Arc::new(Relaxed { chain: Some(webpki), provider }) } else { webpki }
        }
    };
    let mut config = builder.dangerous().with_custom_certificate_verifier(verifier).with_no_client_auth();
    // PostgreSQL 17 requires it for `sslnegotiation=direct`; older servers ignore it.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(config)
}

/// The roots a certificate must chain to: only the PEM file `sslrootcert` names (a private CA
/// is not mixed with every public one), or the system's for none or `sslrootcert=system`.
fn roots(root: Option<&str>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match root {
        None | Some("system") => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                return Err(format!("no system root certificates ({:?}): set sslrootcert", found.errors));
            }
        }
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("sslrootcert {path}: {e}"))?;
            for cert in certs {
                store.add(cert).map_err(|e| format!("sslrootcert {path}: {e}"))?;
            }
            if store.is_empty() {
                return Err(format!("sslrootcert {path}: no certificate in it"));
            }
        }
    }
    Ok(store)
}

/// The checks short of `verify-full` (webpki's own verifier). The handshake's own signatures
/// are always checked, with the provider's algorithms (as webpki checks them).
#[derive(Debug)]
struct Relaxed {
    /// `verify-ca`: the full check, except that a certificate for another name passes. webpki
    /// checks the name only after the chain, so a name error means the chain was good. `None`:
    /// `prefer` and `require` without a root file, as libpq: the session is encrypted, but the
    /// certificate is taken as shown.
    chain: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Relaxed {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            checked => checked,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// tokio-postgres's TLS hook, on rustls.
#[derive(Clone)]
struct MakeRustls(Arc<ClientConfig>);

impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = InvalidDnsNameError;

    fn make_tls_connect(&mut self, host: &str) -> Result<RustlsConnect, InvalidDnsNameError> {
        Ok(RustlsConnect { config: self.0.clone(), name: ServerName::try_from(host)?.to_owned() })
    }
}

struct RustlsConnect {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            tokio_rustls::TlsConnector::from(self.config).connect(self.name, stream).await.map(RustlsStream)
        })
    }
}

struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    /// No SCRAM channel binding (`tls-server-end-point` needs the certificate's hash
    /// algorithm): SCRAM still authenticates, and `verify-full` is what stops a middleman.
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(url: &str) -> Result<PgTarget, String> {
        PgTarget::read(url)
    }

    #[test]
    fn no_sslmode_or_disable_stays_plain_and_keeps_the_url() {
        for url in
            ["postgres://u@h/db", "postgres://u@h/db?sslmode=disable", "postgres://u@h/db?sslmode=allow"]
        {
            let target = read(url).unwrap();
            assert!(!target.tls(), "{url}");
            assert_eq!(target.url, "postgres://u@h/db");
        }
        let target = read("postgres://u@h/db?application_name=x").unwrap();
        assert!(!target.tls());
        assert_eq!(target.url, "postgres://u@h/db?application_name=x");
    }

    #[test]
    fn tls_modes_are_taken_out_of_the_url_and_other_options_kept() {
        let target = read("postgres://u@h/db?connect_timeout=3&sslmode=require&application_name=x").unwrap();
        assert!(target.tls());
        assert_eq!(target.url, "postgres://u@h/db?connect_timeout=3&application_name=x");
        assert_eq!(target.tls.unwrap().mode, SslMode::Require);
        assert_eq!(read("postgres://u@h/db?sslmode=prefer").unwrap().tls.unwrap().mode, SslMode::Prefer);
        for mode in ["verify-ca", "verify-full"] {
            let target = read(&format!("postgres://u@h/db?sslmode={mode}&sslrootcert=system")).unwrap();
            assert_eq!(target.url, "postgres://u@h/db");
            assert_eq!(target.tls.unwrap().mode, SslMode::Require);
        }
    }

    #[test]
    fn mistakes_are_refused_with_the_reason() {
        let e = read("postgres://u@h/db?sslmode=verify_full").err().unwrap();
        assert!(e.contains("verify-full"), "{e}");
        let e = read("postgres://u@h/db?sslrootcert=/etc/ca.pem").err().unwrap();
        assert!(e.contains("without sslmode"), "{e}");
        let e = read("postgres://u@h/db?sslmode=verify-full&sslrootcert=%2Fnowhere%2Fca.pem").err().unwrap();
        assert!(e.contains("/nowhere/ca.pem"), "{e}");
        assert!(read("postgres://u@h/db?sslmode=require&sslrootcert=%zz").is_err());
    }
}
