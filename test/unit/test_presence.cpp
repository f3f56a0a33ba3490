// engine::PresenceFeed: snapshots for new connections, join/leave frames
// for moved counts, and a fresh snapshot for a connection whose queue had no
// room (nothing is queued without bound).
#include "engine/presence.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

using pgbs::engine::PresenceCounts;
using pgbs::engine::PresenceFeed;

namespace {

struct Sink {
  std::map<uint64_t, std::vector<std::string>> got;
  std::map<uint64_t, int> room; // frames a connection still takes (absent: any)
  PresenceFeed::Push push() {
    return [this](uint64_t id, const std::string &f) {
      auto it = room.find(id);
      if (it != room.end()) {
        if (it->second == 0)
          return false;
        it->second--;
      }
      got[id].push_back(f);
      return true;
    };
  }
};

std::string data_of(const std::string &frame) {
  const std::string head = "event: pgbus:presence\ndata: ";
  EXPECT_EQ(frame.compare(0, head.size(), head), 0) << frame;
  EXPECT_EQ(frame.substr(frame.size() - 2), "\n\n");
  EXPECT_EQ(frame.find("id:"), std::string::npos) << "presence frames carry no id";
  return frame.substr(head.size(), frame.size() - head.size() - 2);
}

} // namespace

TEST(Presence, SnapshotThenChanges) {
  PresenceFeed feed;
  Sink sink;
  feed.add(1, {{10, "room"}});
  EXPECT_TRUE(feed.pending());
  EXPECT_EQ(feed.streams(), std::vector<int64_t>{10});
  std::map<int64_t, PresenceCounts> now;
  now[10][std::string("alice")] = 2;
  now[10][std::nullopt] = 1;
  feed.update(now, sink.push());
  EXPECT_FALSE(feed.pending());
  ASSERT_EQ(sink.got[1].size(), 1u);
  EXPECT_EQ(
      data_of(sink.got[1][0]),
      R"({"stream":"room","action":"snapshot","members":[{"sub":null,"count":1},{"sub":"alice","count":2}]})");

  now[10][std::string("alice")] = 1; // one of alice's connections left
  now[10].erase(std::nullopt);       // the anonymous one too
  now[10][std::string("b\"ob")] = 1; // bob joined
  sink.got.clear();
  feed.update(now, sink.push());
  ASSERT_EQ(sink.got[1].size(), 3u);
  EXPECT_EQ(data_of(sink.got[1][0]), R"({"stream":"room","action":"leave","sub":null,"count":0})");
  EXPECT_EQ(data_of(sink.got[1][1]),
            R"({"stream":"room","action":"leave","sub":"alice","count":1})");
  EXPECT_EQ(data_of(sink.got[1][2]),
            R"({"stream":"room","action":"join","sub":"b\"ob","count":1})");

  sink.got.clear();
  feed.update(now, sink.push()); // nothing moved
  EXPECT_TRUE(sink.got[1].empty());
}

TEST(Presence, NewConnectionGetsSnapshotOthersGetChanges) {
  PresenceFeed feed;
  Sink sink;
  std::map<int64_t, PresenceCounts> now;
  now[10][std::string("a")] = 1;
  feed.add(1, {{10, "room"}});
  feed.update(now, sink.push());
  feed.add(2, {{10, "room"}, {11, "lobby"}});
  now[10][std::string("w")] = 1;
  now[11][std::string("w")] = 1;
  sink.got.clear();
  feed.update(now, sink.push());
  ASSERT_EQ(sink.got[1].size(), 1u);
  EXPECT_EQ(data_of(sink.got[1][0]), R"({"stream":"room","action":"join","sub":"w","count":1})");
  ASSERT_EQ(sink.got[2].size(), 2u) << "one snapshot per stream, no join for itself";
  EXPECT_NE(sink.got[2][0].find("\"action\":\"snapshot\""), std::string::npos);
  EXPECT_NE(sink.got[2][1].find("\"stream\":\"lobby\""), std::string::npos);

  feed.remove(2);
  EXPECT_EQ(feed.streams(), std::vector<int64_t>{10}) << "lobby is no longer counted";
  feed.remove(1);
  EXPECT_TRUE(feed.empty());
  EXPECT_FALSE(feed.pending());
}

TEST(Presence, NoRoomMeansAFreshSnapshotLater) {
  PresenceFeed feed;
  Sink sink;
  std::map<int64_t, PresenceCounts> now;
  feed.add(1, {{10, "room"}});
  feed.update(now, sink.push());
  ASSERT_EQ(sink.got[1].size(), 1u);
  sink.room[1] = 0; // its queue is full
  now[10][std::string("a")] = 1;
  feed.update(now, sink.push());
  now[10][std::string("b")] = 1;
  feed.update(now, sink.push());
  EXPECT_EQ(sink.got[1].size(), 1u) << "nothing queued while there is no room";
  EXPECT_TRUE(feed.pending());
  sink.room.erase(1);
  feed.update(now, sink.push());
  ASSERT_EQ(sink.got[1].size(), 2u);
  EXPECT_EQ(
      data_of(sink.got[1][1]),
      R"({"stream":"room","action":"snapshot","members":[{"sub":"a","count":1},{"sub":"b","count":1}]})");
  EXPECT_FALSE(feed.pending());
}
