//! The typed nodes behind the type-erased graph: a processor, a source's
//! decoder and a sink.

use std::any::Any;
use std::marker::PhantomData;

use crate::error::ProcessError;
use crate::processor::{InitContext, Processor, ProcessorContext, ScheduleId};
use crate::record::{OutputRecord, Record};
use crate::serde::Serde;
use crate::task::{Erased, ErasedNode, NodeEnv};

fn downcast<K: 'static, V: 'static>(
    env: &NodeEnv<'_>,
    input: Erased,
) -> Result<Record<K, V>, ProcessError> {
    input.downcast::<Record<K, V>>().map(|b| *b).map_err(|_| {
        // The builder's typed handles make this unreachable; an error, not a
        // panic, if a future change breaks that.
        ProcessError::msg(format!(
            "node {} received a record of another type",
            env.node_name
        ))
    })
}

fn box_all<K: Send + 'static, V: Send + 'static>(
    records: Vec<Record<K, V>>,
    out: &mut Vec<Erased>,
) {
    out.extend(records.into_iter().map(|r| Box::new(r) as Erased));
}

fn clone_record<K: Clone + Send + 'static, V: Clone + Send + 'static>(
    record: &Erased,
) -> Option<Erased> {
    let r: &dyn Any = record.as_ref();
    r.downcast_ref::<Record<K, V>>()
        .map(|r| Box::new(r.clone()) as Erased)
}

/// A user processor with its input types.
pub(crate) struct ProcessorNode<P, KIn, VIn> {
    pub(crate) processor: P,
    pub(crate) _types: PhantomData<fn(KIn, VIn)>,
}

impl<P, KIn, VIn> ErasedNode for ProcessorNode<P, KIn, VIn>
where
    P: Processor<KIn, VIn>,
    KIn: Send + 'static,
    VIn: Send + 'static,
{
    fn init(&mut self, env: NodeEnv<'_>) -> Result<(), ProcessError> {
        let mut ctx = InitContext { env };
        self.processor.init(&mut ctx)
    }

    fn process(
        &mut self,
        env: NodeEnv<'_>,
        input: Erased,
        out: &mut Vec<Erased>,
    ) -> Result<(), ProcessError> {
        let record = downcast::<KIn, VIn>(&env, input)?;
        let mut forwarded = Vec::new();
        let mut ctx = ProcessorContext {
            env,
            forwarded: &mut forwarded,
        };
        self.processor.process(&mut ctx, record)?;
        box_all(forwarded, out);
        Ok(())
    }

    fn punctuate(
        &mut self,
        env: NodeEnv<'_>,
        schedule: ScheduleId,
        timestamp: i64,
        out: &mut Vec<Erased>,
    ) -> Result<(), ProcessError> {
        let mut forwarded = Vec::new();
        let mut ctx = ProcessorContext {
            env,
            forwarded: &mut forwarded,
        };
        self.processor.punctuate(&mut ctx, schedule, timestamp)?;
        box_all(forwarded, out);
        Ok(())
    }

    fn flush(&mut self, env: NodeEnv<'_>, out: &mut Vec<Erased>) -> Result<(), ProcessError> {
        let mut forwarded = Vec::new();
        let mut ctx = ProcessorContext {
            env,
            forwarded: &mut forwarded,
        };
        self.processor.flush(&mut ctx)?;
        box_all(forwarded, out);
        Ok(())
    }

    fn clone_output(&self, record: &Erased) -> Option<Erased> {
        clone_record::<P::KOut, P::VOut>(record)
    }

    fn close(&mut self) {
        self.processor.close();
    }
}

/// A source: passes its decoded records on.
pub(crate) struct SourceNode<K, V>(pub(crate) PhantomData<fn() -> (K, V)>);

impl<K, V> ErasedNode for SourceNode<K, V>
where
    K: Clone + Send + 'static,
    V: Clone + Send + 'static,
{
    fn init(&mut self, _env: NodeEnv<'_>) -> Result<(), ProcessError> {
        Ok(())
    }

    fn process(
        &mut self,
        _env: NodeEnv<'_>,
        input: Erased,
        out: &mut Vec<Erased>,
    ) -> Result<(), ProcessError> {
        out.push(input);
        Ok(())
    }

    fn punctuate(
        &mut self,
        _env: NodeEnv<'_>,
        _schedule: ScheduleId,
        _timestamp: i64,
        _out: &mut Vec<Erased>,
    ) -> Result<(), ProcessError> {
        Ok(())
    }

    fn clone_output(&self, record: &Erased) -> Option<Erased> {
        clone_record::<K, V>(record)
    }

    fn close(&mut self) {}
}

/// Picks a record's topic (Kafka Streams' `TopicNameExtractor`).
pub(crate) type TopicChooser<K, V> = std::sync::Arc<dyn Fn(&K, &V) -> String + Send + Sync>;

/// A sink: serializes its records for a topic, fixed or chosen per record.
pub(crate) struct SinkNode<K, V> {
    pub(crate) topic: String,
    pub(crate) chooser: Option<TopicChooser<K, V>>,
    pub(crate) _types: PhantomData<fn(K, V)>,
}

impl<K, V> ErasedNode for SinkNode<K, V>
where
    K: Serde,
    V: Serde,
{
    fn init(&mut self, _env: NodeEnv<'_>) -> Result<(), ProcessError> {
        Ok(())
    }

    fn process(
        &mut self,
        env: NodeEnv<'_>,
        input: Erased,
        _out: &mut Vec<Erased>,
    ) -> Result<(), ProcessError> {
        let record = downcast::<K, V>(&env, input)?;
        let topic = match &self.chooser {
            Some(choose) => choose(&record.key, &record.value),
            None => self.topic.clone(),
        };
        env.core.outputs.push(OutputRecord {
            topic,
            partition: None,
            key: record.key.serialize(),
            value: record.value.serialize(),
            timestamp: record.timestamp,
            headers: record.headers,
        });
        Ok(())
    }

    fn punctuate(
        &mut self,
        _env: NodeEnv<'_>,
        _schedule: ScheduleId,
        _timestamp: i64,
        _out: &mut Vec<Erased>,
    ) -> Result<(), ProcessError> {
        Ok(())
    }

    fn clone_output(&self, _record: &Erased) -> Option<Erased> {
        None
    }

    fn close(&mut self) {}
}
