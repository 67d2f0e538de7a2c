//! A GGUF file's own chat template (`tokenizer.chat_template`, Jinja as Hugging Face writes it),
//! rendered with minijinja in the environment Hugging Face renders it in: blocks trimmed and
//! stripped, loop controls, Python's string methods (`.strip()`, `.split()`), and
//! `raise_exception`.

use minijinja::{Environment, Error, ErrorKind, context};
use serde::Serialize;

use super::ChatMessage;

pub(super) struct Jinja {
    env: Environment<'static>,
    bos: String,
    eos: String,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'a str,
    content: &'a str,
}

impl Jinja {
    /// The template `source`, with the file's bos and eos tokens' text for `bos_token` and
    /// `eos_token`; a template minijinja cannot read is refused, with why.
    pub(super) fn new(source: &str, bos: String, eos: String) -> Result<Jinja, String> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |message: String| -> Result<String, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, message))
        });
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| format!("tokenizer.chat_template: {}", describe(&e)))?;
        Ok(Jinja { env, bos, eos })
    }

    /// The prompt for `messages`, the assistant's turn opened after them (thinking off, for the
    /// templates that have it).
    pub(super) fn render(&self, messages: &[ChatMessage]) -> Result<String, String> {
        let messages: Vec<Message> = messages.iter().map(|m| Message { role: &m.role, content: &m.content }).collect();
        let template = self.env.get_template("chat").map_err(|e| describe(&e))?;
        template
            .render(context! {
                messages => messages,
                add_generation_prompt => true,
                bos_token => self.bos,
                eos_token => self.eos,
                enable_thinking => false,
            })
            .map_err(|e| format!("the chat template: {}", describe(&e)))
    }
}

fn describe(e: &Error) -> String {
    match e.detail() {
        Some(detail) if !e.to_string().contains(detail) => format!("{e}: {detail}"),
        _ => e.to_string(),
    }
}

/// The chat template of Gemma 3 (from its Hugging Face repository), for GGUF files of the
/// architecture that carry none (llama.cpp likewise falls back on a template of its own by
/// architecture). Images are left out: this runtime sends text.
pub(super) const GEMMA3: &str = r#"{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {{- message['content'] | trim }}
    {{- '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"#;
