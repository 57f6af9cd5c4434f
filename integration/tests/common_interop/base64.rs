//! Standard base64 with padding (RFC 4648 §4), the form kafka_tool.py's
//! `--encoding base64` reads and writes. Arbitrary bytes must cross the
//! JSON boundary unchanged; a dozen lines do that without a dependency.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Encodes `data`.
pub fn encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let byte = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let n = (byte(0) << 16) | (byte(1) << 8) | byte(2);
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

/// Decodes `text`; an error names the first character that is not base64.
pub fn decode(text: &str) -> Result<Vec<u8>, String> {
    let body = text.trim_end_matches('=');
    if !text.len().is_multiple_of(4) || text.len() - body.len() > 2 {
        return Err(format!("{text:?} is not padded base64"));
    }
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in body.bytes() {
        let Some(v) = ALPHABET.iter().position(|&a| a == c) else {
            return Err(format!("{:?} in {text:?} is not base64", char::from(c)));
        };
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

#[test]
fn round_trips_every_length_and_matches_rfc_4648_vectors() {
    for (plain, encoded) in [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ] {
        assert_eq!(encode(plain.as_bytes()), encoded);
        assert_eq!(decode(encoded).unwrap(), plain.as_bytes());
    }
    let all: Vec<u8> = (0..=255).collect();
    for n in 0..all.len() {
        assert_eq!(decode(&encode(&all[..n])).unwrap(), &all[..n]);
    }
    assert!(decode("Zm9").is_err());
    assert!(decode("Zm9*").is_err());
}
