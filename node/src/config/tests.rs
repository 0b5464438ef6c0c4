use super::*;

fn file(text: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), text).expect("write");
    file
}

#[test]
fn a_config_file_fills_in_what_the_flags_leave_out() {
    let settings = file(
        r#"
        id = 3
        listen = "127.0.0.1:7103"
        data_dir = "/var/lib/tenure"
        election_max = "400ms"
        join = true
        require_registration = false
        insecure = true

        [peers]
        1 = "10.0.0.1:7101"
        2 = "10.0.0.2:7101"
        3 = "10.0.0.3:7101"
        "#,
    );
    let path = settings.path().display().to_string();
    let config = Config::load_from(["tenured", "--config", &path, "--election-max", "500ms"])
        .expect("config");
    assert_eq!(config.id, 3);
    assert_eq!(config.peers.len(), 3);
    assert_eq!(config.advertised_addr(), "10.0.0.3:7101");
    assert!(config.join);
    assert!(!config.require_registration);
    assert!(config.insecure, "--insecure from the file");
    // The flag beats the file; the file beats the default.
    assert_eq!(config.election_max, Duration::from_millis(500));
    assert_eq!(config.data_dir, PathBuf::from("/var/lib/tenure"));
    config.validate().expect("valid");
}

#[test]
fn the_environment_beats_the_file() {
    let settings = file(
        "id = 1\nlisten = \"a:1\"\ndata_dir = \"d\"\npeers = \"1=a:1\"\nsnapshot_keep_logs = 5\n",
    );
    let path = settings.path().display().to_string();
    std::env::set_var("TENURED_SNAPSHOT_KEEP_LOGS", "77");
    let config = Config::load_from(["tenured", &format!("--config={path}")]);
    std::env::remove_var("TENURED_SNAPSHOT_KEEP_LOGS");
    assert_eq!(config.expect("config").snapshot_keep_logs, 77);
}

#[test]
fn the_file_is_named_by_the_last_flag_or_else_by_the_environment() {
    let first = file("id = 1\n");
    let last = file("id = 2\n");
    let (first, last) = (first.path().to_owned(), last.path().to_owned());
    let args = |list: &[&str]| list.iter().map(OsString::from).collect::<Vec<_>>();
    let flags = args(&[
        "tenured",
        "--config",
        first.to_str().expect("utf-8"),
        &format!("--config={}", last.display()),
    ]);
    assert_eq!(config_path(&flags), Some(last));
    std::env::set_var("TENURED_CONFIG", &first);
    let named = config_path(&args(&["tenured", "--id", "3"]));
    std::env::remove_var("TENURED_CONFIG");
    assert_eq!(named, Some(first));
}

#[test]
fn a_setting_the_node_does_not_know_is_refused() {
    let settings = file("id = 1\nelection_maximum = \"1s\"\n");
    let path = settings.path().display().to_string();
    let error = Config::load_from(["tenured", "--config", &path]).expect_err("a typo");
    assert!(
        error
            .to_string()
            .contains("unknown setting `election_maximum`"),
        "{error}"
    );
}

/// Node 1 on `listen` with `peers` and the `extra` flags.
fn parsed(listen: &str, peers: &str, extra: &[&str]) -> Config {
    let mut args = vec!["tenured", "--id", "1", "--data-dir", "d"];
    args.extend(["--listen", listen, "--peers", peers]);
    args.extend(extra);
    Config::try_parse_from(args).expect("parses")
}

fn exposure(listen: &str, peers: &str, extra: &[&str]) -> anyhow::Result<()> {
    parsed(listen, peers, extra).validate()
}

#[test]
fn a_network_address_without_a_token_file_is_refused_unless_insecure() {
    exposure("127.0.0.1:7101", "1=127.0.0.1:7101", &[]).expect("loopback is fine");
    exposure("localhost:7101", "1=localhost:7101", &[]).expect("loopback is fine");
    for (listen, peers) in [
        ("0.0.0.0:7101", "1=127.0.0.1:7101"),
        ("127.0.0.1:7101", "1=10.0.0.1:7101"),
        ("127.0.0.1:7101", "1=127.0.0.1:7101,2=tenure-2:7101"),
    ] {
        let error = exposure(listen, peers, &[]).expect_err("open on a network");
        assert!(error.to_string().contains("--token-file"), "{error}");
        exposure(listen, peers, &["--insecure"]).expect("--insecure");
    }
}

#[test]
fn a_peer_token_in_clear_to_a_network_peer_is_refused_unless_insecure_transport() {
    let auth = ["--token-file", "tokens"];
    exposure("127.0.0.1:7101", "1=127.0.0.1:7101", &auth).expect("loopback is fine");
    let error = exposure("0.0.0.0:7101", "1=10.0.0.1:7101", &auth).expect_err("in clear");
    assert!(
        error.to_string().contains("--insecure-transport"),
        "{error}"
    );
    let mut flags = auth.to_vec();
    flags.push("--insecure-transport");
    exposure("0.0.0.0:7101", "1=10.0.0.1:7101", &flags).expect("--insecure-transport");
    let tls = ["--tls-cert", "c", "--tls-key", "k", "--tls-ca", "ca"];
    let mut flags = auth.to_vec();
    flags.extend(tls);
    exposure("0.0.0.0:7101", "1=10.0.0.1:7101", &flags).expect("TLS");
}

#[test]
fn metrics_in_plain_http_stay_on_loopback_unless_tls_or_insecure() {
    let metrics = |listen: &str, extra: &[&str]| {
        let mut flags = vec!["--metrics-listen", listen];
        flags.extend(extra);
        exposure("127.0.0.1:7101", "1=127.0.0.1:7101", &flags)
    };
    metrics("127.0.0.1:9101", &[]).expect("loopback");
    let error = metrics("0.0.0.0:9101", &[]).expect_err("open");
    assert!(error.to_string().contains("plain HTTP"), "{error}");
    metrics("0.0.0.0:9101", &["--insecure"]).expect("--insecure");
    let tls = ["--tls-cert", "c", "--tls-key", "k", "--tls-ca", "ca"];
    metrics("0.0.0.0:9101", &tls).expect("over TLS");
    let config = parsed(
        "127.0.0.1:1",
        "1=127.0.0.1:1",
        &["--metrics-listen", "9101"],
    );
    assert_eq!(config.metrics_listen.as_deref(), Some("127.0.0.1:9101"));
}

#[test]
fn a_gateway_on_a_network_needs_auth_and_tls_unless_told_otherwise() {
    let gateway = |listen: &str, extra: &[&str]| {
        let mut flags = vec!["--http-listen", listen];
        flags.extend(extra);
        exposure("127.0.0.1:7101", "1=127.0.0.1:7101", &flags)
    };
    gateway("127.0.0.1:8080", &[]).expect("loopback");
    gateway("8080", &[]).expect("a bare port is loopback");
    let error = gateway("0.0.0.0:8080", &[]).expect_err("open");
    assert!(error.to_string().contains("without auth"), "{error}");
    gateway("0.0.0.0:8080", &["--insecure"]).expect("--insecure");
    let auth = ["--token-file", "tokens"];
    let error = gateway("0.0.0.0:8080", &auth).expect_err("tokens in clear");
    assert!(error.to_string().contains("in clear"), "{error}");
    let mut flags = auth.to_vec();
    flags.push("--insecure-transport");
    gateway("0.0.0.0:8080", &flags).expect("--insecure-transport");
    let mut flags = auth.to_vec();
    flags.extend(["--tls-cert", "c", "--tls-key", "k", "--tls-ca", "ca"]);
    gateway("0.0.0.0:8080", &flags).expect("HTTPS");
    let config = parsed("127.0.0.1:1", "1=127.0.0.1:1", &["--http-listen", "8080"]);
    assert_eq!(config.http_listen.as_deref(), Some("127.0.0.1:8080"));
}
