//! The UD queue pair state machine: RESET -> INIT -> RTR -> RTS, ERR and back to RESET.
//!
//! Each legal transition knows which `ibv_qp_attr` fields `ibv_modify_qp` needs for a
//! UD QP; the state only advances when the modify call succeeded, so a failed modify
//! leaves the machine (and the QP) where they were.

use crate::ffi::consts::{
    IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_QKEY, IBV_QP_SQ_PSN, IBV_QP_STATE,
};
use thiserror::Error;

/// A QP state (`enum ibv_qp_state`, the values UD uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Just created, or reset after an error.
    Reset,
    /// Bound to a port, P_Key and Q_Key; receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send (and receive): the working state.
    Rts,
    /// Broken: every outstanding work request is flushed; only RESET is useful next.
    Error,
}

impl QpState {
    /// The `enum ibv_qp_state` value.
    pub fn as_ibv(self) -> u32 {
        match self {
            Self::Reset => 0,
            Self::Init => 1,
            Self::Rtr => 2,
            Self::Rts => 3,
            Self::Error => 6,
        }
    }
}

/// A transition the machine refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "illegal UD QP transition {from:?} -> {to:?} (UD QPs go Reset -> Init -> Rtr -> Rts; any -> Error; any -> Reset)"
)]
pub struct QpStateError {
    /// State the QP is in.
    pub from: QpState,
    /// State that was asked for.
    pub to: QpState,
}

/// Tracks a UD QP's state and plans legal `ibv_modify_qp` calls.
#[derive(Debug, Clone)]
pub struct UdQpStateMachine {
    state: QpState,
}

impl Default for UdQpStateMachine {
    fn default() -> Self {
        Self::new()
    }
}

impl UdQpStateMachine {
    /// A freshly created QP: RESET.
    pub fn new() -> Self {
        Self {
            state: QpState::Reset,
        }
    }

    /// The current state.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// The `ibv_qp_attr_mask` a UD QP needs to go from the current state to `to`.
    pub fn attr_mask(&self, to: QpState) -> Result<u32, QpStateError> {
        use QpState::*;
        match (self.state, to) {
            (Reset, Init) => Ok(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
            (Init, Rtr) => Ok(IBV_QP_STATE),
            (Rtr, Rts) => Ok(IBV_QP_STATE | IBV_QP_SQ_PSN),
            (_, Error) | (_, Reset) => Ok(IBV_QP_STATE),
            (from, to) => Err(QpStateError { from, to }),
        }
    }

    /// Moves to `to` by calling `modify(attr_mask)`; the state changes only if it succeeds.
    pub fn transition<E: From<QpStateError>>(
        &mut self,
        to: QpState,
        modify: impl FnOnce(u32) -> Result<(), E>,
    ) -> Result<(), E> {
        let mask = self.attr_mask(to)?;
        modify(mask)?;
        self.state = to;
        Ok(())
    }

    /// Walks the QP up to RTS one legal step at a time (an errored QP is reset first).
    pub fn bring_up<E: From<QpStateError>>(
        &mut self,
        mut modify: impl FnMut(QpState, u32) -> Result<(), E>,
    ) -> Result<(), E> {
        loop {
            let next = match self.state {
                QpState::Error => QpState::Reset,
                QpState::Reset => QpState::Init,
                QpState::Init => QpState::Rtr,
                QpState::Rtr => QpState::Rts,
                QpState::Rts => return Ok(()),
            };
            self.transition(next, |mask| modify(next, mask))?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    enum E {
        State(QpStateError),
        Modify,
    }
    impl From<QpStateError> for E {
        fn from(e: QpStateError) -> Self {
            E::State(e)
        }
    }

    #[test]
    fn the_legal_sequence_uses_the_ud_attribute_masks() {
        let mut m = UdQpStateMachine::new();
        let mut calls = Vec::new();
        m.bring_up(|to, mask| {
            calls.push((to, mask));
            Ok::<_, E>(())
        })
        .unwrap();
        assert_eq!(m.state(), QpState::Rts);
        assert_eq!(
            calls,
            vec![
                (
                    QpState::Init,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY
                ),
                (QpState::Rtr, IBV_QP_STATE),
                (QpState::Rts, IBV_QP_STATE | IBV_QP_SQ_PSN),
            ]
        );
    }

    #[test]
    fn skipping_or_going_backwards_is_refused_without_calling_modify() {
        let mut m = UdQpStateMachine::new();
        let r = m.transition(QpState::Rts, |_| -> Result<(), E> {
            panic!("modify must not be called")
        });
        assert_eq!(
            r,
            Err(E::State(QpStateError {
                from: QpState::Reset,
                to: QpState::Rts
            }))
        );
        assert_eq!(m.state(), QpState::Reset);
        m.transition(QpState::Init, |_| Ok::<_, E>(())).unwrap();
        assert!(m.attr_mask(QpState::Init).is_err());
        assert!(m.attr_mask(QpState::Rts).is_err());
        m.transition(QpState::Rtr, |_| Ok::<_, E>(())).unwrap();
        assert_eq!(m.attr_mask(QpState::Init).unwrap_err().to, QpState::Init);
    }

    #[test]
    fn a_failed_modify_leaves_the_state_unchanged() {
        let mut m = UdQpStateMachine::new();
        assert_eq!(
            m.transition(QpState::Init, |_| Err(E::Modify)),
            Err(E::Modify)
        );
        assert_eq!(m.state(), QpState::Reset);
        let mut n = 0;
        let r = m.bring_up(|to, _| {
            n += 1;
            if to == QpState::Rtr {
                Err(E::Modify)
            } else {
                Ok(())
            }
        });
        assert_eq!(r, Err(E::Modify));
        assert_eq!((m.state(), n), (QpState::Init, 2));
    }

    #[test]
    fn an_errored_qp_is_reset_before_coming_back_up() {
        let mut m = UdQpStateMachine::new();
        m.bring_up(|_, _| Ok::<_, E>(())).unwrap();
        m.transition(QpState::Error, |mask| {
            assert_eq!(mask, IBV_QP_STATE);
            Ok::<_, E>(())
        })
        .unwrap();
        assert!(m.attr_mask(QpState::Rts).is_err());
        let mut path = Vec::new();
        m.bring_up(|to, _| {
            path.push(to);
            Ok::<_, E>(())
        })
        .unwrap();
        assert_eq!(
            path,
            vec![QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts]
        );
    }

    #[test]
    fn states_have_their_ibv_values() {
        let v: Vec<u32> = [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Error,
        ]
        .iter()
        .map(|s| s.as_ibv())
        .collect();
        assert_eq!(v, vec![0, 1, 2, 3, 6]);
    }
}
