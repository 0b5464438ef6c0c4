use super::*;

#[test]
fn a_connection_runs_out_of_strikes_and_they_come_back_with_time() {
    let connection = Connection::new(None, 4, None);
    for _ in 0..4 {
        assert!(!connection.strike(4));
    }
    assert!(connection.strike(4), "the fifth strike in a row cuts it");
    // Two strikes a second come back.
    *connection.strikes.lock().expect("lock") = (0.0, Instant::now() - Duration::from_secs(1));
    assert!(!connection.strike(4));
    assert!(!connection.strike(4));
    assert!(connection.strike(4));
}

#[test]
fn an_address_in_the_cooldown_is_kept_out_until_it_ends() {
    let cooldown = Cooldown::default();
    let ip: IpAddr = "10.0.0.9".parse().expect("ip");
    assert!(!cooldown.holds(ip));
    cooldown.start(ip, Duration::from_secs(60));
    assert!(cooldown.holds(ip));
    cooldown.start(ip, Duration::ZERO);
    assert!(!cooldown.holds(ip));
}
