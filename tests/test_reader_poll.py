"""`run`'s idle readers look for new lines at most every half flush interval."""

from olr_buffer.runtime import PipelineOptions, reader_poll_seconds


def test_the_reader_poll_follows_a_short_flush_interval():
    assert reader_poll_seconds(PipelineOptions(flush_seconds=1.0, poll_seconds=0.1)) == 0.1
    assert reader_poll_seconds(PipelineOptions(flush_seconds=0.1, poll_seconds=0.1)) == 0.05
    assert reader_poll_seconds(PipelineOptions(flush_seconds=0.0, poll_seconds=0.1)) == 0.01  # not a busy loop
    assert reader_poll_seconds(PipelineOptions(flush_seconds=0.0, poll_seconds=0.002)) == 0.002  # asked for
