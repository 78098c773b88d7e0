//! One limit across regions (decision 4200) against DynamoDB Local: the regional hot path's cost,
//! the saga's steps, and simulated regions under random fault schedules judged by an oracle.

mod hot_path;
