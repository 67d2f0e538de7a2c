//! Numbers as the walker writes them ([`super::Walker`]): which beginnings can still become a
//! value within the bounds, digit by digit.

use super::FRACTION_DIGITS;
use crate::llama::schema::{Bound, MAX_DIGITS};

/// Numbers as they are written: at most [`MAX_DIGITS`] digits before the point and (not for an
/// integer) [`FRACTION_DIGITS`] after it, as integers of that many fraction digits, with the
/// bounds in the same unit.
pub(super) struct Grid {
    integer: bool,
    /// The unit's fraction digits.
    scale: u32,
    lo: i128,
    hi: i128,
}

impl Grid {
    pub(super) fn new(integer: bool, min: Bound, max: Bound) -> Grid {
        let scale = if integer { 0 } else { FRACTION_DIGITS };
        let unit = 10f64.powi(scale as i32);
        // A bound on the grid, the float's rounding aside.
        let at = |b: Bound, up: bool| {
            let x = b.value * unit;
            let near = x.round();
            let x = if (x - near).abs() < 1e-6 * x.abs().max(1.0) { near } else { x };
            let on = x.fract() == 0.0;
            (match (up, on && b.exclusive) {
                (true, true) => x + 1.0,
                (true, false) => x.ceil(),
                (false, true) => x - 1.0,
                (false, false) => x.floor(),
            }) as i128
        };
        Grid { integer, scale, lo: at(min, true), hi: at(max, false) }
    }

    /// Whether `text` begins a number whose value can still be within the bounds.
    pub(super) fn feasible(&self, text: &str) -> bool {
        let Some(p) = Parts::read(text, self.integer) else { return false };
        let unit = 10i128.pow(self.scale);
        let full = 10i128.pow(MAX_DIGITS);
        // The magnitudes (in units) a completion of `p` can have, as ranges.
        let mut ranges: Vec<(i128, i128)> = Vec::new();
        match (&p.int, &p.frac) {
            (None, _) => ranges.push((0, full * unit - 1)),
            (Some(i), None) => {
                let more = if i.digits == 1 && i.value == 0 { 0 } else { MAX_DIGITS - i.digits };
                for k in 0..=more {
                    let at = i.value * 10i128.pow(k);
                    ranges.push((at * unit, (at + 10i128.pow(k)) * unit - 1));
                }
            }
            (Some(i), Some(f)) => {
                let rest = 10i128.pow(self.scale - f.digits);
                let at = i.value * unit + f.value * rest;
                ranges.push((at, at + rest - 1));
            }
        }
        let meets = |(a, b): (i128, i128)| a.max(self.lo) <= b.min(self.hi);
        ranges.into_iter().any(|(a, b)| {
            let positive = !p.negative && meets((a, b));
            // `-0` is not written: a negative magnitude is at least one unit.
            let negative = (p.negative || p.int.is_none()) && a.max(1) <= b && meets((-b, -a.max(1)));
            positive || negative
        })
    }

    /// Whether `text` is a whole number within the bounds.
    pub(super) fn complete(&self, text: &str) -> bool {
        let Some(p) = Parts::read(text, self.integer) else { return false };
        let (Some(i), frac) = (&p.int, &p.frac) else { return false };
        if frac.as_ref().is_some_and(|f| f.digits == 0) {
            return false;
        }
        let unit = 10i128.pow(self.scale);
        let f = frac.as_ref().map_or(0, |f| f.value * 10i128.pow(self.scale - f.digits));
        let magnitude = i.value * unit + f;
        let value = if p.negative { -magnitude } else { magnitude };
        // `-0` is not written.
        !(p.negative && magnitude == 0) && (self.lo..=self.hi).contains(&value)
    }
}

/// A number's beginning: its sign, the digits before the point, and those after it.
struct Parts {
    negative: bool,
    int: Option<Digits>,
    frac: Option<Digits>,
}

struct Digits {
    value: i128,
    digits: u32,
}

impl Parts {
    /// `None` when `text` begins no JSON number of the grid (no leading zeros, no exponent).
    fn read(text: &str, integer: bool) -> Option<Parts> {
        let (negative, rest) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (int, frac) = match rest.split_once('.') {
            Some(_) if integer => return None,
            Some((i, f)) => (i, Some(f)),
            None => (rest, None),
        };
        let digits = |s: &str, most: u32| -> Option<Digits> {
            if s.len() > most as usize || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some(Digits { value: s.parse().unwrap_or(0), digits: s.len() as u32 })
        };
        if int.len() > 1 && int.starts_with('0') {
            return None;
        }
        let int = if int.is_empty() { None } else { Some(digits(int, MAX_DIGITS)?) };
        let frac = match frac {
            None => None,
            // A point needs digits before it.
            Some(_) if int.is_none() => return None,
            Some(f) => Some(digits(f, FRACTION_DIGITS)?),
        };
        Some(Parts { negative, int, frac })
    }
}
