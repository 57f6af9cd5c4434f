package dev.weir.compare;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

import org.apache.kafka.common.errors.SerializationException;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Text as Weir's {@code String} serde reads and writes it: UTF-8 on the wire
 * (as {@code Serdes.String()}), but a null or a byte sequence that is not
 * UTF-8 is a deserialization error (Weir rejects it; Kafka's
 * StringDeserializer would pass null on and replace bad bytes with U+FFFD).
 * With the deserialization handler set to log-and-continue, as Weir's
 * default, such a record is logged and skipped on both sides.
 */
final class Text {
    private Text() {}

    static final class StrictDeserializer implements Deserializer<String> {
        @Override
        public String deserialize(String topic, byte[] data) {
            if (data == null) {
                throw new SerializationException("String: null where a value was expected (topic " + topic + ")");
            }
            try {
                return StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(data))
                    .toString();
            } catch (CharacterCodingException e) {
                throw new SerializationException("String: not UTF-8 (topic " + topic + ")", e);
            }
        }
    }

    /** Weir's String serde. */
    static Serde<String> serde() {
        return Serdes.serdeFrom(new StringSerializer(), new StrictDeserializer());
    }

    /** Rust's char::is_whitespace: the Unicode White_Space property. */
    static boolean isWhitespace(int cp) {
        return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680
            || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F
            || cp == 0x205F || cp == 0x3000;
    }
}
