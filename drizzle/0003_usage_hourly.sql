CREATE TABLE `usage_hourly` (
	`hour` integer NOT NULL,
	`key_id` text NOT NULL,
	`model` text NOT NULL,
	`requests` integer NOT NULL,
	`prompt_tokens` integer NOT NULL,
	`completion_tokens` integer NOT NULL,
	`cost_nanos` integer NOT NULL,
	`search_count` integer NOT NULL,
	PRIMARY KEY(`hour`, `key_id`, `model`)
);
--> statement-breakpoint
CREATE INDEX `usage_hourly_key_hour_idx` ON `usage_hourly` (`key_id`,`hour`);--> statement-breakpoint
ALTER TABLE `usage_records` ADD `flush_id` integer;--> statement-breakpoint
-- Records written before rollups existed: summed once here. Every later row is rolled up by the flush that inserts it.
INSERT INTO `usage_hourly` (`hour`, `key_id`, `model`, `requests`, `prompt_tokens`, `completion_tokens`, `cost_nanos`, `search_count`)
SELECT `created_at` - (`created_at` % 3600000), `key_id`, `model`, COUNT(*), SUM(`prompt_tokens`), SUM(`completion_tokens`), SUM(`cost_nanos`), SUM(`search_count`)
FROM `usage_records` GROUP BY 1, 2, 3;
