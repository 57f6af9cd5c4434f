//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), as Kafka uses
//! them (KIP-84): no channel binding, no authorization id.
//!
//! The exchange is a pure state machine, so it is tested against the RFC's
//! example without any I/O; [`super::handshake`] carries the messages in
//! SaslAuthenticate requests.

use std::num::NonZeroU32;

use ring::{digest, hmac, pbkdf2};

/// Kafka's smallest iteration count; fewer would let a rogue server ask for
/// a cheap-to-crack proof.
const MIN_ITERATIONS: u32 = 4096;
/// A bound on the work a server can make us do per connection.
const MAX_ITERATIONS: u32 = 1_000_000;

/// Which hash SCRAM uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScramMechanism {
    /// SCRAM-SHA-256.
    Sha256,
    /// SCRAM-SHA-512.
    Sha512,
}

impl ScramMechanism {
    /// The SASL mechanism name.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            ScramMechanism::Sha256 => hmac::HMAC_SHA256,
            ScramMechanism::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            ScramMechanism::Sha256 => &digest::SHA256,
            ScramMechanism::Sha512 => &digest::SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            ScramMechanism::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            ScramMechanism::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }
}

/// The client side of one exchange, before the server's first message.
#[derive(Debug)]
pub struct ScramClient {
    mechanism: ScramMechanism,
    password: String,
    client_nonce: String,
    client_first_bare: String,
}

/// After the client's final message: what is needed to check the server.
#[derive(Debug)]
pub struct AwaitingServerFinal {
    expected_signature: Vec<u8>,
}

/// The user name as SCRAM writes it: `=` and `,` escaped (RFC 5802 §5.1).
fn sasl_name(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

fn hmac(alg: hmac::Algorithm, key: &[u8], msg: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(alg, key), msg).as_ref().to_vec()
}

/// The value of attribute `name` (`r`, `s`, `i`, `v`, `e`) in a SCRAM message.
fn attribute(message: &str, name: char) -> Option<&str> {
    message.split(',').find_map(|part| {
        let mut chars = part.chars();
        if chars.next() == Some(name) && chars.next() == Some('=') {
            part.get(name.len_utf8() + 1..)
        } else {
            None
        }
    })
}

impl ScramClient {
    /// Starts an exchange with a fresh random nonce.
    pub fn new(mechanism: ScramMechanism, user: &str, password: &str) -> Self {
        let nonce: [u8; 24] = rand::random();
        Self::with_nonce(mechanism, user, password, &base64::encode(&nonce))
    }

    /// Starts an exchange with a given nonce (for tests against known vectors).
    pub fn with_nonce(mechanism: ScramMechanism, user: &str, password: &str, nonce: &str) -> Self {
        Self {
            mechanism,
            password: password.to_owned(),
            client_nonce: nonce.to_owned(),
            client_first_bare: format!("n={},r={nonce}", sasl_name(user)),
        }
    }

    /// The client-first message.
    pub fn client_first(&self) -> String {
        format!("n,,{}", self.client_first_bare)
    }

    /// Answers the server-first message with the client-final message.
    ///
    /// # Errors
    /// A description when the server's message is malformed, its nonce does
    /// not extend ours, or its iteration count is out of bounds.
    pub fn client_final(self, server_first: &str) -> Result<(String, AwaitingServerFinal), String> {
        if let Some(e) = attribute(server_first, 'e') {
            return Err(format!("the server refused: {e}"));
        }
        let nonce = attribute(server_first, 'r').ok_or("server-first without a nonce")?;
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err("the server's nonce does not extend ours".to_owned());
        }
        let salt = attribute(server_first, 's')
            .and_then(base64::decode)
            .ok_or("server-first without a valid salt")?;
        let iterations: u32 = attribute(server_first, 'i')
            .and_then(|i| i.parse().ok())
            .ok_or("server-first without a valid iteration count")?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(format!(
                "iteration count {iterations} outside {MIN_ITERATIONS}..={MAX_ITERATIONS}"
            ));
        }
        let iterations = NonZeroU32::new(iterations).ok_or("zero iterations")?;

        let m = self.mechanism;
        let mut salted = vec![0u8; m.digest().output_len()];
        pbkdf2::derive(
            m.pbkdf2(),
            iterations,
            &salt,
            self.password.as_bytes(),
            &mut salted,
        );
        let client_key = hmac(m.hmac(), &salted, b"Client Key");
        let stored_key = digest::digest(m.digest(), &client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let client_signature = hmac(m.hmac(), stored_key.as_ref(), auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&client_signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = hmac(m.hmac(), &salted, b"Server Key");
        let expected_signature = hmac(m.hmac(), &server_key, auth_message.as_bytes());
        Ok((
            format!("{without_proof},p={}", base64::encode(&proof)),
            AwaitingServerFinal { expected_signature },
        ))
    }
}

impl AwaitingServerFinal {
    /// Checks the server-final message: the server proves it knows the
    /// password too.
    ///
    /// # Errors
    /// A description when the server refused or its signature is wrong.
    pub fn verify(&self, server_final: &str) -> Result<(), String> {
        if let Some(e) = attribute(server_final, 'e') {
            return Err(format!("the server refused: {e}"));
        }
        let signature = attribute(server_final, 'v')
            .and_then(base64::decode)
            .ok_or("server-final without a valid signature")?;
        // Not secret, so a plain comparison is fine: it only authenticates the server.
        if signature != self.expected_signature {
            return Err(
                "the server's signature is wrong: it does not know the password".to_owned(),
            );
        }
        Ok(())
    }
}

/// Standard base64 with padding, just what SCRAM needs.
pub(crate) mod base64 {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub(crate) fn encode(data: &[u8]) -> String {
        let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
        for chunk in data.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    pub(crate) fn decode(text: &str) -> Option<Vec<u8>> {
        let bytes = text.as_bytes();
        if !bytes.len().is_multiple_of(4) {
            return None;
        }
        let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
        for (index, chunk) in bytes.chunks(4).enumerate() {
            let last = index + 1 == bytes.len() / 4;
            let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
            if pad > 2 || (pad > 0 && !last) {
                return None;
            }
            let mut n = 0u32;
            for &c in &chunk[..4 - pad] {
                let v = ALPHABET.iter().position(|&a| a == c)?;
                n = (n << 6) | v as u32;
            }
            n <<= 6 * pad as u32;
            let decoded = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
            out.extend_from_slice(&decoded[..3 - pad]);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";

    #[test]
    fn reproduces_the_rfc_7677_exchange() {
        let client = ScramClient::with_nonce(
            ScramMechanism::Sha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO",
        );
        assert_eq!(client.client_first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let (client_final, awaiting) = client.client_final(SERVER_FIRST).unwrap();
        assert_eq!(
            client_final,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        awaiting
            .verify("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        let wrong = awaiting.verify("v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
        assert!(wrong.unwrap_err().contains("signature is wrong"));
    }

    #[test]
    fn refuses_rogue_server_first_messages() {
        let client = || ScramClient::with_nonce(ScramMechanism::Sha512, "user", "pencil", "abc");
        for (server_first, why) in [
            (
                "r=xyzdef,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
                "does not extend",
            ),
            ("r=abc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "does not extend"),
            (
                "r=abcdef,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1",
                "iteration count 1",
            ),
            (
                "r=abcdef,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4000000000",
                "outside",
            ),
            ("r=abcdef,s=%%%,i=4096", "salt"),
            ("e=unknown-user", "refused"),
        ] {
            let err = client().client_final(server_first).unwrap_err();
            assert!(err.contains(why), "{server_first}: {err}");
        }
    }

    #[test]
    fn user_names_are_escaped_and_base64_round_trips() {
        let c = ScramClient::with_nonce(ScramMechanism::Sha256, "a=b,c", "p", "n");
        assert_eq!(c.client_first(), "n,,n=a=3Db=2Cc,r=n");
        for len in 0..20usize {
            let data: Vec<u8> = (0..len as u8).map(|b| b.wrapping_mul(37)).collect();
            assert_eq!(base64::decode(&base64::encode(&data)).unwrap(), data);
        }
        assert_eq!(base64::encode(b"n,,"), "biws");
        assert!(base64::decode("abc").is_none());
        assert!(base64::decode("a=bc").is_none());
    }
}
