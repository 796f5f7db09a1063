"""Barge-in: what speech during a reply does (part of the turn controller, see
:mod:`app.conversation.turns`). Pure: decisions depend on frame times only.

While a reply is pending or playing, a speech candidate ducks the reply; once it has lasted
``barge_in_min_speech_ms`` the reply is interrupted (player fade-out and engine cancel, done by
the pipeline at once) and the state is INTERRUPTED until the VAD confirms the onset, which
starts the new turn with its pre-roll.

The duck comes at the first voiced frame; if the speech is not confirmed (a cough, a door, or a
burst of echo the canceller let through) the volume comes back and the reply carries on. To
stop the reply, speech the sound gate did not hear over the echo bound needs one frame the VAD
is sure of (``CONFIDENT_PROBABILITY``): the canceller's residue of the reply scores lower. Every
such duck-and-restore, and every barge-in that stopped a reply but then turned out not to be
speech (no onset followed), is a *false interruption*. While the echo canceller is still
warming up (``echo_guard``) speech during a reply only ducks it: it is confirmed once the
guard is over, if the person is still talking. Speech that stops for less than
``DIP_TOLERANCE_S`` and goes on is one utterance: a dip keeps the duck and the first onset
(once the reply is stopped, a pause as long as the endpoint silence does).

Sound first (issue 14): the listener's sound gate says every 10 ms whether the canceller's
output holds sound over the noise floor and over any echo the reply can make
(:mod:`app.vad.sound`). ``SOUND_DUCK_BLOCKS`` of it during an audible reply duck the reply at
once, before the VAD's 32 ms frame is even complete; the VAD confirms (the duck is then
speech's) or, after ``SOUND_WAIT_S`` or when the sound stops, the reply comes back (a false
interruption, as any duck-and-restore). Where no echo of the speaker can be in the sound
(a headset, no echo heard, nothing played yet) the sound is the person's for sure: speech
counts from its start, so a soft onset the VAD scores late does not delay the stop, and a word
the VAD scores only weakly (at least ``WEAK_PROBABILITY`` in ``WEAK_FRAMES`` frames running,
within sound: short Arabic words scored 0.15-0.45) confirms the barge-in too, and starts the
turn from the sound's start. (Over an echo, the canceller's residue is speech to the VAD as
well: there only the VAD's own onset confirms.)
"""

from __future__ import annotations

from dataclasses import replace

from app.conversation.turn_actions import FalseInterruption
from app.conversation.turn_state import SOUND_GAP_S, TurnState
from app.vad.base import VadState, VadUpdate
from app.vad.sound import SoundBlock

DIP_TOLERANCE_S = 0.15  # speech that stops for less than this and goes on is one utterance
SOUND_DUCK_BLOCKS = 2  # 20 ms of sound over noise and echo duck the reply
SOUND_WAIT_S = 0.3  # a duck on sound alone waits this long for the VAD
WEAK_PROBABILITY = 0.15  # weakly voiced: the VAD's probability on rain stays under this
WEAK_FRAMES = 3
# Over a reply, with no sound over the echo bound, the VAD must be this sure of one frame: the
# canceller's residue of a reply's syllable scored 0.49-0.55 for three frames and stopped its
# own reply; the people's barge-ins of the corpus without such sound had a frame at 0.80 or
# more (BENCHMARKS.md, turn-taking, 2026-11-26 fourth session).
CONFIDENT_PROBABILITY = 0.7
# A turn's audio starts a pre-roll before the weakly voiced run (frames at WEAK_PROBABILITY or
# more, one frame's dip allowed) that led into its onset, up to this much before the onset:
# a soft first word scored 0.30-0.44 in rain at 5 dB and the onset came on the second word,
# 434 ms late, so the pre-roll alone lost the first (BENCHMARKS.md, ninth session).
LEAD_MAX_S = 0.5
# A reply's echo may come back this long after its last sample: its way back (assumed where
# none was measured) and the room's reverberation, as half-duplex deafness counts them
# (app.conversation.echo_control). Under the warm-up guard the cold canceller's residue of a
# first reply's last syllable scored 0.9 from 50 ms before its end to 0.3 s after it, and
# became a turn (RT60 0.8 s, 0.5 m room): speech that begins before this is over must outlast it.
DEFAULT_ECHO_WAY_BACK_S = 0.2
REVERB_MARGIN_S = 0.15
ECHO_TAIL_S = DEFAULT_ECHO_WAY_BACK_S + REVERB_MARGIN_S


class BargeInPolicy(TurnState):
    def _on_sound(self, block: SoundBlock, now_s: float) -> None:
        """One 10 ms block of the sound gate (in capture order with the VAD frames)."""
        if block.sound:
            if (self._sound_start_s is None
                    or block.start_s - self._sound_end_s > SOUND_GAP_S + 1e-9):
                self._sound_start_s, self._sound_blocks = block.start_s, 0
                self._sound_echo_free = True
            self._sound_end_s = block.end_s
            self._sound_blocks += 1
            self._sound_echo_free = self._sound_echo_free and block.echo_free
        if self._sound_duck_s is not None:
            return  # given back or taken over at the VAD's frames (``_sound_duck_over``)
        if (block.sound and self._sound_blocks >= SOUND_DUCK_BLOCKS and self._may_duck()
                and self._sound_start_s not in (None, self._sound_spent_s)):
            self._sound_duck_s, self._weak_frames = self._sound_start_s, 0
            self._set_duck(True)

    def _may_duck(self) -> bool:
        return (self.params.barge_in and self._reply_turn is not None and self._reply_audible
                and not self._ducked and not self._interrupted and self._user_turn is None
                and self._closing is None and self._episode_start_s is None)

    def _sound_duck_over(self, update: VadUpdate) -> bool:
        """At a VAD frame that is no speech: the sound that ducked stopped a dip's length
        before the frame's end, or the VAD had ``SOUND_WAIT_S`` to call it speech. Decided on
        frames, not blocks: a word's voiced part may follow its first sound by up to a dip,
        and the frame that would call it speech is not complete when the blocks say so."""
        assert self._sound_duck_s is not None
        return (update.end_s - self._sound_end_s >= DIP_TOLERANCE_S - 1e-9
                or update.end_s - self._sound_duck_s >= SOUND_WAIT_S - 1e-9)

    def _sound_not_confirmed(self, now_s: float) -> None:
        assert self._sound_duck_s is not None
        if self._reply_turn is not None and self._ducked:
            self._actions.append(FalseInterruption(self._reply_turn, self._sound_duck_s, now_s,
                                                   False))
        self._sound_spent_s, self._sound_duck_s = self._sound_duck_s, None
        self._set_duck(False)

    def _weakly_voiced(self, update: VadUpdate, now_s: float, echo_guard: bool) -> bool:
        """A word the VAD scores weakly, within sound that ducked the reply: confirmed as a
        barge-in once it has lasted; the turn starts from the sound's start (True)."""
        onset = self._sound_duck_s
        if onset is None or update.probability < WEAK_PROBABILITY or not self._sound_echo_free:
            self._weak_frames = 0
            return False
        self._weak_frames += 1
        spoken_ms = (update.end_s - onset) * 1000
        if (echo_guard or self._weak_frames < WEAK_FRAMES or self._sound_end_s < update.start_s
                or spoken_ms + 1e-6 < self.params.barge_in_min_speech_ms):
            return False
        self._interrupted_turn = self._reply_turn or 0
        self._interrupt(onset, now_s, "speech")
        self._segmenter.begin(onset, update.end_s)
        self._start_turn(onset, onset - self.params.pre_roll_ms / 1000)
        self._last_voiced_s = update.end_s
        return True

    def _idle_vad(self, update: VadUpdate, now_s: float, echo_guard: bool) -> None:
        self._track_lead(update)
        voiced = update.onset_s is not None and update.state in (VadState.STARTING,
                                                                 VadState.SPEAKING)
        if not voiced and self._weakly_voiced(update, now_s, echo_guard):
            return
        if voiced and self._sound_duck_s is not None:  # the VAD takes the duck over
            if self._sound_echo_free:  # the person's for sure: speech began with the sound
                update = replace(update, onset_s=min(update.onset_s or update.start_s,
                                                     self._sound_duck_s))
            self._sound_duck_s = None
        if not voiced:
            if self._sound_duck_s is not None:
                if self._sound_duck_over(update):
                    self._sound_not_confirmed(now_s)
                return
            if self._dip_over(update):  # the speech heard is over, whatever it did
                self._not_confirmed(update, now_s)
            return
        onset = self._episode_onset(update)
        if self._reply_turn is not None:
            if not self.params.barge_in:
                return
            self._set_duck(self._reply_audible)
            spoken_ms = (self._episode_end_s - onset) * 1000
            if (not echo_guard and spoken_ms + 1e-6 >= self.params.barge_in_min_speech_ms
                    and self._convincing(onset)):
                self._interrupted_turn = self._reply_turn or 0
                self._interrupt(onset, now_s, "speech")
                self._interrupted = True
        confirmed = update.event == "onset" or (
            (self._interrupted or self._outlasting_echo) and update.state == VadState.SPEAKING)
        if confirmed and self._reply_turn is None:
            self._outlasting_echo = self._in_echo_tail(onset, update)
            if self._outlasting_echo:
                return
            self._interrupted = False
            self._start_turn(onset, self._lead_from(onset) - self.params.pre_roll_ms / 1000)
            self._last_voiced_s = update.last_voiced_s or update.end_s

    def _in_echo_tail(self, onset_s: float, update: VadUpdate) -> bool:
        """Speech that began before a reply's echo could be over (under the warm-up guard,
        ``ECHO_TAIL_S`` after its last sample) is no turn until it outlasts that."""
        tail = self._echo_tail_until_s
        return tail is not None and onset_s < tail - 1e-9 and update.end_s < tail - 1e-9

    def _track_lead(self, update: VadUpdate) -> None:
        """Where the run of weakly voiced frames leading to an onset began, while nothing
        plays (over a reply the canceller's residue scores as weakly voiced too)."""
        if self._reply_turn is not None:
            self._lead_start_s = None
        elif update.probability >= WEAK_PROBABILITY:
            if self._lead_start_s is None:
                self._lead_start_s = update.start_s
            self._lead_dips = 0
        elif self._lead_start_s is not None:
            self._lead_dips += 1
            if self._lead_dips >= 2:
                self._lead_start_s = None

    def _lead_from(self, onset_s: float) -> float:
        """The start of the lead-in to this onset, at most ``LEAD_MAX_S`` sooner."""
        lead = self._lead_start_s
        if lead is None:
            return onset_s
        return max(min(lead, onset_s), onset_s - LEAD_MAX_S)

    def _convincing(self, onset_s: float) -> bool:
        """Enough to stop the reply: the VAD sure of one frame of this speech, or the sound gate
        hearing sound over the echo bound in it (up to a run's gap before the VAD's onset).
        Otherwise the speech only ducks the reply, which comes back if it stops."""
        return self._sound_heard_from(onset_s) or self._episode_peak >= CONFIDENT_PROBABILITY

    def _episode_onset(self, update: VadUpdate) -> float:
        """Onset of the speech this voiced frame belongs to: speech that starts again within
        ``DIP_TOLERANCE_S`` of earlier speech continues it (a dip in the VAD's probability
        must not move the turn's start, or the turn's audio would miss the first words)."""
        assert update.onset_s is not None
        start = update.onset_s
        if (self._episode_start_s is not None
                and start - self._episode_end_s <= self._dip_tolerance_s() + 1e-9):
            start = min(start, self._episode_start_s)
        else:
            self._episode_peak = 0.0
        self._episode_peak = max(self._episode_peak, update.probability)
        self._episode_start_s = start
        self._episode_end_s = max(update.last_voiced_s or update.end_s, start)
        return start

    def _dip_over(self, update: VadUpdate) -> bool:
        return (self._episode_start_s is None
                or update.end_s - self._episode_end_s >= self._dip_tolerance_s() - 1e-9)

    def _dip_tolerance_s(self) -> float:
        """How long speech may stop and still go on as one utterance: a dip's length, or,
        once this speech has stopped the reply, a pause's (the endpoint silence), as in a
        turn. With the reply stopped nothing it plays can be mistaken for the person; the
        canceller, still suppressing the reply's echo, swallowed 190 ms of a person talking
        over a reply in a 0 dB room, and the turn's audio then began 249 ms after their
        first word (a fresh onset, its pre-roll too short to reach back)."""
        if self._interrupted:
            return self.params.endpoint_silence_ms / 1000
        return DIP_TOLERANCE_S

    def _not_confirmed(self, update: VadUpdate, now_s: float) -> None:
        """Speech that was not confirmed as a turn ended: if it ducked or stopped a reply,
        that was a false interruption; if it began in a reply's echo tail and stopped before
        outlasting it, it was the echo (the VAD starts afresh). Its episode ends either way
        (one left open would keep sound from ducking the reply, see ``_may_duck``)."""
        onset = self._episode_start_s if self._episode_start_s is not None else update.start_s
        if self._ducked and self._reply_turn is not None:
            self._actions.append(FalseInterruption(self._reply_turn, onset, now_s, False))
            if update.state == VadState.STOPPING:
                self._restart_vad()  # what was heard needs a fresh onset to count
        elif self._interrupted:
            self._actions.append(FalseInterruption(self._interrupted_turn, onset, now_s, True))
        elif self._outlasting_echo:
            self._restart_vad()  # the reply's echo: what follows needs an onset of its own
        self._outlasting_echo = False
        self._set_duck(False)
        self._interrupted = False
        self._episode_start_s = None
